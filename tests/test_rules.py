"""The config's rules, one module a group (app/rules/): each group's `check` takes that group alone and runs on it
alone (a typed node, or the dataclass itself, as ImageLoader has it); a kind is the schema's type, not its keys."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from app import rules
from app.errors import ConfigError
from app.rules import data, model, queue
from app.schema import COMMAND_SCHEMAS, Config, CustomModelConfig, KerasAppConfig, QueueConfig, ResnetModelConfig
from app.schema.data import TableColumns, TableDataConfig

RULES = Path(rules.__file__).parent
SHARED = {"__init__", "common"}  # the package's `check` over every group, and what every group's module shares
GROUPS = {f.name for schema in (Config, *COMMAND_SCHEMAS.values()) for f in dataclasses.fields(schema)}


def group_faults(name: str, source: str) -> list[str]:
    """What in rules module `name` reads past its group: a function taking the whole config, a `check` not taking its
    group alone, a `check_with_<other>` not taking its group and that other one."""
    faults = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        args = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
        other = node.name.removeprefix("check_with_")
        if {"cfg", "config"} & set(args):
            faults.append(f"{name}.{node.name} takes the whole config")
        elif node.name == "check" and args != [name]:
            faults.append(f"{name}.check takes {args}, not its group `{name}` alone")
        elif node.name.startswith("check_with_") and (args != [name, other] or other not in GROUPS):
            faults.append(f"{name}.{node.name} takes {args}, not its group and the group `{other}`")
    return faults


def test_each_groups_rules_module_takes_that_group_alone():
    modules = {p.stem: p.read_text() for p in RULES.glob("*.py") if p.stem not in SHARED}
    assert {"data", "augment", "queue", "trainer", "model", "optimizer", "scheduler", "logger"} <= modules.keys()
    assert set(modules) <= GROUPS  # a module a config group, named as the group
    assert all("def check(" in source for source in modules.values())
    faults = [fault for name, source in modules.items() for fault in group_faults(name, source)]
    assert faults == []
    # negative controls: the whole config taken, a check of another group, a cross-group rule on a plain value
    assert group_faults("queue", "def check(cfg):\n    return cfg.queue.workers\n") == [
        "queue.check takes the whole config"]
    assert group_faults("queue", "def check(data):\n    pass\n") == [
        "queue.check takes ['data'], not its group `queue` alone"]
    assert group_faults("model", "def check_with_data(model, size):\n    pass\n") == [
        "model.check_with_data takes ['model', 'size'], not its group and the group `data`"]


def test_a_groups_rules_run_on_that_group_alone():
    with pytest.raises(ConfigError, match="config key `queue.workers` = -1"):
        queue.check(OmegaConf.structured(QueueConfig(workers=-1)))
    queue.check(OmegaConf.structured(QueueConfig(workers="auto", max_size=3)))  # negative control
    table = TableDataConfig(table="t.csv", columns=TableColumns(label="kind"), val_fraction=0.5, test_fraction=0.6)
    with pytest.raises(ConfigError) as refused:  # the dataclass itself, as ImageLoader builds it
        data.check(table)
    assert (refused.value.key, refused.value.value) == ("data.test_fraction", 0.6)
    data.check(dataclasses.replace(table, test_fraction=0.1))  # negative control


def test_the_schema_type_decides_a_models_rules_not_its_keys():
    with pytest.raises(ConfigError, match="model.widths"):
        model.check(OmegaConf.structured(ResnetModelConfig(widths=[])))
    with pytest.raises(ConfigError, match="model.name"):
        model.check(OmegaConf.structured(KerasAppConfig(name="ResNet51")))
    model.check(OmegaConf.structured(CustomModelConfig(kwargs={"widths": [], "name": "ResNet51"})))  # its own kwargs
    trainer = OmegaConf.create({"unfreeze_at_epoch": 2})
    with pytest.raises(ConfigError, match="trainer.unfreeze_at_epoch"):
        model.check_with_trainer(OmegaConf.structured(KerasAppConfig()), trainer)  # nothing frozen to unfreeze
    model.check_with_trainer(OmegaConf.structured(KerasAppConfig(freeze_backbone=True)), trainer)  # negative control


def test_the_constants_stay_importable_from_app_rules():
    assert (rules.AUTO, rules.TOP_K, rules.SEEDS, rules.JIT_COMPILE["true"]) == ("auto", 5, 2**32, True)
    assert rules.top_k(OmegaConf.create({"top_k": "auto"}), classes=10) == 5
    assert rules.top_k(OmegaConf.create({"top_k": "auto"}), classes=5) is None  # negative control: k classes
