"""Every command shown in README.md and docs/*.md (in an indented or fenced block) runs here as the
page shows it, so the documents cannot rot: in page order, README first, in one working directory,
so a page's commands can build on each other (train, then resume=latest, then evaluate).

What the test changes, and only that: the sizes, forced small (TINY_SIZES, appended, and a later
override wins); what a command leaves unset, made small (TINY_DEFAULTS); the documents'
placeholders (PLACEHOLDERS) made the test's own folder of images and its runs. A `$ command`
followed by its output must print lines of that output's form (numbers aside). A command that
cannot run here is listed in SKIPPED with why, and a page that shows one says so.

The TensorFlow commands on one device run one after another in one process
(tests/docs_runner.py: the CLI's own `main`, as `python -m app` calls it), so TensorFlow loads
once; a command on JAX or on several devices runs in a process of its own, as its backend and
devices must be set before they load.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
APP = re.compile(r"^(\.venv/bin/)?python -m app(\s|$)")
SKIPPED = {
    "srun ": "needs a SLURM cluster",
    "hydra/launcher=slurm": "needs a SLURM cluster (Hydra's submitit launcher)",
    "trainer.coordinator=": "needs several hosts",
    "make test": "is this test suite, which CI runs",
    "bin/tensorboard ": "is a server that runs until stopped; tests/training/test_dashboards.py reads the event "
                        "files it shows with TensorBoard's own reader",
}
TINY_SIZES = {"train": ["data.image_size=[32,32]", "data.batch_size=4"],
              "preview": ["data.image_size=[32,32]", "data.batch_size=4"],
              "bench": ["data.image_size=[32,32]", "data.batch_size=4", "bench.modes=[loader]", "bench.batches=2",
                        "bench.warmup=1", "bench.memory=false"]}
TINY_DEFAULTS = {"trainer.epochs": "2", "queue.workers": "1", "model.widths": "[8]",
                 "data.num_images": "24", "data.source_size": "48", "data.num_classes": "2"}
DATA_KEYS = {"synthetic": ("data.num_images", "data.source_size", "data.num_classes"), "folder": (), "cifar": ()}
LOG_PREFIX = re.compile(r"^\[[^\]]*\]\[[^\]]*\]\[[^\]]*\] - ")


def placeholders(tmp: Path) -> dict[str, str]:
    return {"/some/images": str(tmp / "images"), "/data/flowers": str(tmp / "images"), "$HOME": str(tmp / "home")}


def documented() -> list[dict]:
    """Each command of every page: {"page", "line", "text", "output"} (`output`: the lines a
    `$ command` is shown printing), or {"page", "line", "python"} for a Python snippet."""
    found = []
    for page in DOCS:
        lines = page.read_text().splitlines()
        fence, i = None, 0
        while i < len(lines):
            line, stripped = lines[i], lines[i].strip()
            if stripped.startswith("```"):
                if fence is None:
                    fence, start = stripped[3:] or "text", i + 1
                else:
                    if fence == "python":
                        found.append({"page": page.name, "line": start, "python": "\n".join(lines[start:i])})
                    fence = None
                i += 1
                continue
            shown = stripped[2:] if stripped.startswith("$ ") else stripped
            in_block = fence is not None or line.startswith("    ")
            command = APP.match(shown) or shown.startswith(("make ", "srun ", ".venv/bin/"))
            if in_block and fence != "python" and command:
                start, text = i + 1, shown
                while text.endswith("\\"):
                    i += 1
                    text = text[:-1].rstrip() + " " + lines[i].strip()
                output = []
                if stripped.startswith("$ "):
                    while i + 1 < len(lines) and lines[i + 1].startswith("    ") and \
                            not lines[i + 1].strip().startswith("$ "):
                        i += 1
                        output.append(lines[i].strip())
                found.append({"page": page.name, "line": start, "text": re.sub(r"\s+#\s.*$", "", text),
                              "output": output})
            i += 1
    return found


def argv_of(command: dict, tmp: Path) -> list[str] | None:
    """The `python -m app` arguments a documented command line runs here, tiny; None when skipped."""
    text = command["text"]
    if any(mark in text for mark in SKIPPED):
        return None
    for shown, here in placeholders(tmp).items():
        text = text.replace(shown, here)
    text = re.sub(r"outputs/multirun/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d", "{LAST_SWEEP}", text)
    text = re.sub(r"outputs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d", "{LAST_RUN}", text)
    if text == "make train":
        made = subprocess.run(["make", "-n", "train"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        assert ".venv/bin/python -m app train" in made, made
        text = ".venv/bin/python -m app train"
    argv = shlex.split(APP.sub("", text))
    return argv + tiny(argv)


def tiny(argv: list[str]) -> list[str]:
    word, args = (argv[0], argv[1:]) if argv else ("", [])
    if word not in ("train", "plan", "preview", "bench") or any(a.startswith(("--", "resume=")) for a in args):
        return []
    given = {a.split("=", 1)[0] for a in args if "=" in a}
    defaults = {key: value for key, value in TINY_DEFAULTS.items()
                if key not in given and (not key.startswith("data.") or key in DATA_KEYS[source_of(args)])
                and not (key == "model.widths" and "model" in given)}
    if word == "plan":  # the plan's figures are what the page shows: only the data made small
        defaults = {key: value for key, value in defaults.items() if key.startswith("data.")}
    if "trainer.cpu_devices" not in given and "trainer.strategy=mirrored" in args:
        defaults["trainer.cpu_devices"] = "2"
    return [f"{key}={value}" for key, value in defaults.items()] + TINY_SIZES.get(word, [])


def source_of(args: list[str]) -> str:
    """The data source a command trains on: its own `data=`, its experiment's, or the default."""
    for arg in args:
        if arg.startswith("data="):
            return arg.split("=", 1)[1]
        if arg.startswith("experiment="):
            preset = (ROOT / "conf" / "experiment" / f"{arg.split('=', 1)[1]}.yaml").read_text()
            if chosen := re.search(r"override /data: (\w+)", preset):
                return chosen.group(1)
    return "synthetic"


def apart(argv: list[str]) -> bool:
    """Runs in a process of its own: the backend or the devices are chosen before they load."""
    return "trainer.backend=jax" in argv or "trainer.strategy=mirrored" in argv


def form(line: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "#", " ".join(LOG_PREFIX.sub("", line.strip()).split()))


def shows(expected: str, printed: set[str]) -> bool:
    """A documented output line is printed in the same form, numbers aside; a line that explains
    itself in parentheses (the figures behind a choice) up to its first parenthesis."""
    want = form(expected)
    head = want.split("(")[0]
    return want in printed or (len(head) > 15 and any(line.startswith(head) for line in printed))


def write_images(folder: Path) -> None:
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        (folder / name).mkdir(parents=True)
        for i in range(12):
            Image.fromarray(rng.integers(0, 256, (40, 48, 3), np.uint8)).save(folder / name / f"{i}.jpg")


def write_cifar(folder: Path) -> None:
    """CIFAR-10's python batches, 20 rows each, every class in every batch."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        blob = {b"batch_label": name.encode(), b"labels": [i % 10 for i in range(20)],
                b"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8), b"filenames": [b"x.png"] * 20}
        (folder / name).write_bytes(pickle.dumps(blob, protocol=2))
    names = [n.encode() for n in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                                  "truck")]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))


def weights_file(home: Path) -> None:
    """The ImageNet weights file models.md fine-tunes from, here random: the same layers, in the
    same legacy HDF5 format (Keras saves it so only as a whole model, which loads as weights)."""
    code = ("import keras, sys; keras.applications.EfficientNetV2B0(include_top=False, weights=None, "
            "input_shape=(32, 32, 3)).save(sys.argv[1])")
    target = home / ".keras" / "models" / "efficientnetv2-b0_notop.h5"
    target.parent.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", code, str(target)], check=True, capture_output=True, timeout=300)


def run_all(commands: list[dict], cwd: Path, env: dict) -> list[dict]:
    listed, results = cwd.parent / f"commands-{len(commands)}.json", cwd.parent / "results.json"
    listed.write_text(json.dumps(commands))
    if results.exists():
        results.unlink()
    runner = subprocess.run([sys.executable, str(ROOT / "tests" / "docs_runner.py"), str(listed), str(results)],
                            cwd=cwd, env=env, timeout=1200, capture_output=True, text=True)
    done = json.loads(results.read_text()) if results.exists() else []
    if len(done) < len(commands):  # the runner died: what it said, as the next command's result
        done.append({**commands[len(done)], "status": f"runner died ({runner.returncode})",
                     "printed": runner.stdout[-2000:] + runner.stderr[-3000:]})
    return done


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("docs")
    work, home = tmp / "work", tmp / "home"
    write_images(tmp / "images")
    write_cifar(work / "datasets" / "cifar10" / "cifar-10-batches-py")
    weights_file(home)
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT / "tests"),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    together, alone, skipped = [], [], []
    for command in documented():
        if "python" in command:
            together.append({**command, "python": command["python"].replace("outputs/<date>/<time>", "{LAST_RUN}")})
            continue
        argv = argv_of(command, tmp)
        if argv is None:
            skipped.append(command)
        else:
            (alone if apart(argv) else together).append({**command, "argv": argv})
    results = run_all(together, work, env)
    for command in alone:
        results += run_all([command], work, env)
    return {"planned": together + alone, "results": results, "skipped": skipped}


def test_the_documents_show_commands_and_skip_only_what_needs_a_cluster(ran):
    pages = {c["page"] for c in ran["planned"]}
    assert {"README.md", "models.md", "queue.md", "runs.md", "run-directory.md"} <= pages, pages
    assert len(ran["planned"]) >= 25
    for command in ran["skipped"]:
        reason = next(why for mark, why in SKIPPED.items() if mark in command["text"])
        assert reason, command


def test_every_documented_command_runs_as_shown(ran):
    failures = []
    for result in ran["results"]:
        where = f"{result['page']}:{result['line']}: {result.get('text') or 'python snippet'}"
        expected = result.get("output", [])
        refused = any(line.startswith("error:") for line in expected)
        if (result["status"] != 0) != refused:
            failures.append(f"{where}: exit status {result['status']}\n{result['printed'][-1500:]}")
            continue
        printed = {form(line) for line in result["printed"].splitlines()}
        missing = [line for line in expected if line not in ("...", "") and not shows(line, printed)]
        if missing:
            failures.append(f"{where}: does not print {missing[:3]}\n{result['printed'][-1500:]}")
    assert not failures, "\n\n".join(failures)
    assert len(ran["results"]) == len(ran["planned"]), "the runner stopped early"
