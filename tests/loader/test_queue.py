"""The queue's settings are one frozen `Queue` (app/loader/settings.py), built once a command with `auto` chosen by
app/capacity/auto.py alone; the loader, plan, bench and ImageLoader take it as it is, never the word `auto` again."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from loaders import assert_clean
from marked import MarkedSplit

from app.capacity import auto
from app.config import conf_dir, load
from app.loader.pipeline import build_loader
from app.loader.settings import Queue
from app.schema import register

APP = Path(auto.__file__).resolve().parent.parent
OWNERS = {"capacity/auto.py"}  # where `auto` is chosen; app/rules/ checks the word as the config holds it
HELD = {field.name for field in dataclasses.fields(Queue)}


def auto_rereads(tree: ast.AST) -> list[str]:
    """Comparisons with AUTO (or of `.workers`/`.max_size` with "auto"), and reads of what a Queue holds off a
    config's queue group (`config.queue.workers`, `self.config.queue.timeout_s`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            parts = list(ast.walk(node))
            named = {p.id for p in parts if isinstance(p, ast.Name)} | {p.attr for p in parts
                                                                         if isinstance(p, ast.Attribute)}
            said = any(isinstance(p, ast.Constant) and p.value == "auto" for p in parts)
            if "AUTO" in named or (said and named & {"workers", "max_size"}):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Attribute) and node.attr in HELD and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "queue":
            holder = node.value.value
            if (isinstance(holder, ast.Name) and holder.id in ("config", "cfg")) or \
                    (isinstance(holder, ast.Attribute) and holder.attr == "config"):
                found.append(ast.unparse(node))
    return found


def test_no_module_past_the_choice_reads_auto_or_the_configs_queue_again():
    scanned = {str(p.relative_to(APP)): p for p in APP.rglob("*.py")
               if p.parts[len(APP.parts)] != "rules" and str(p.relative_to(APP)) not in OWNERS}
    assert {"loader/settings.py", "loader/enqueuer.py", "commands/bench.py", "commands/plan.py", "library.py",
            "capacity/queue_plan.py", "bench/keras_modes.py"} <= scanned.keys()
    found = {name: hits for name, path in scanned.items() if (hits := auto_rereads(ast.parse(path.read_text())))}
    assert found == {}
    # negative controls: the owner does compare, and each way of reading it again is seen
    assert auto_rereads(ast.parse((APP / "capacity/auto.py").read_text()))
    again = ("w = n if queue.workers == AUTO else 2\nm = 2 if q.max_size == 'auto' else q.max_size\n"
             "t = config.queue.timeout_s\nu = self.config.queue.use_multiprocessing\ns = config.queue.shuffle\n")
    assert sorted(auto_rereads(ast.parse(again))) == ["config.queue.timeout_s", "q.max_size == 'auto'",
                                                      "queue.workers == AUTO", "self.config.queue.use_multiprocessing"]


def test_the_loader_takes_the_commands_queue_as_it_is(children):
    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        config = load(compose("config", overrides=["data.image_size=[8,8]", "data.batch_size=2", "queue.workers=auto",
                                                   "queue.max_size=auto", "queue.timeout_s=9"]))
    queue = Queue(workers=0, max_size=5, timeout_s=3.0)  # what the command chose: the loader asks nothing else
    with build_loader(config, {"val": (MarkedSplit(4), [])}, queue=queue, on_bad_sample="mark") as loader:
        assert loader.queue == queue.with_slots(1)  # in-process: one slot, built on demand; the rest as given
        assert len(list(loader.every_sample("val"))) == 2
    assert_clean(children)
    with pytest.raises(TypeError, match="queue= or the enqueuer's settings="):  # negative control: none given
        build_loader(config, {"val": (MarkedSplit(4), [])})
