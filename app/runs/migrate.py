"""Saved configs' old keys and module paths read as today's (`migrated`), one `STEPS` step each: old runs still work."""

from __future__ import annotations

from omegaconf import OmegaConf

from app.config import conf_dir
from app.schema import COMMAND_KEYS, TARGETS, option_of

# modules that moved, whose dotted paths a saved config names in a `_target_` (the loggers', the data's)
MOVED_MODULES = {"app.training.dashboards.": "app.tracking.dashboards.",
                 "app.training.mlflow_writer.": "app.tracking.mlflow_writer.",
                 "app.training.sweeps.": "app.runs.sweeps.",
                 **{f"app.data.{name}.": f"app.data.sources.{name}."
                    for name in ("synthetic", "cifar", "folder", "table")},
                 "app.data.prepared.": "app.data.copies.prepared."}


def _moved_modules(saved):
    """Old module paths in `_target_`s made today's; first of `STEPS`: the others look targets up in today's tables."""
    if isinstance(saved, list):
        return [_moved_modules(item) for item in saved]
    if not isinstance(saved, dict):
        return saved
    out = {key: _moved_modules(value) for key, value in saved.items()}
    target = out.get("_target_")
    for old, new in MOVED_MODULES.items():
        if isinstance(target, str) and target.startswith(old):
            out["_target_"] = new + target[len(old):]
    return out


def _precision(saved: dict) -> dict:
    """trainer.mixed_precision (a bool) became trainer.precision."""
    trainer = dict(saved.get("trainer") or {})
    if "mixed_precision" not in trainer:
        return saved
    trainer["precision"] = "mixed_float16" if trainer.pop("mixed_precision") else "float32"
    return {**saved, "trainer": trainer}


def _optimizer(saved: dict) -> dict:
    """trainer.optimizer and trainer.lr became the optimizer group: that preset at that lr, on a constant schedule."""
    trainer = dict(saved.get("trainer") or {})
    if "optimizer" in saved or not {"optimizer", "lr"} & set(trainer):
        return saved
    name = trainer.pop("optimizer", "adam")
    preset = OmegaConf.to_container(OmegaConf.load(conf_dir() / "optimizer" / f"{name}.yaml"))
    preset.pop("defaults", None)
    preset["learning_rate"] = trainer.pop("lr", preset["learning_rate"])
    return {**saved, "trainer": trainer, "optimizer": preset, "scheduler": {"name": "constant"}}


def _without_command_keys(saved: dict) -> dict:
    """Each command's own keys (COMMAND_KEYS: evaluate's, predict's, bench's, preview's, ...) left the run's config."""
    return {key: value for key, value in saved.items() if key not in COMMAND_KEYS}


def _chosen_by_target(saved: dict) -> dict:
    """data, scheduler and logger chose their option by `name`; now, like model and optimizer, by `_target_`."""
    out = dict(saved)
    for group, targets in TARGETS.items():
        node = saved.get(group)
        if isinstance(node, dict) and "name" in node and "_target_" not in node and node["name"] in targets:
            out[group] = {"_target_": targets[node["name"]], **{k: v for k, v in node.items() if k != "name"}}
    return out


def _loggers_by_option(saved: dict) -> dict:
    """logger was one node; now each chosen logger is a node under its option's name (none for `logger=none`)."""
    node = saved.get("logger")
    option = option_of("logger", node.get("_target_")) if isinstance(node, dict) else None
    if option is None:
        return saved
    return {**saved, "logger": {} if option == "none" else {option: dict(node)}}


# oldest change first (but for the module paths'); a change of keys adds its step here
STEPS = (_moved_modules, _precision, _optimizer, _without_command_keys, _chosen_by_target, _loggers_by_option)


def migrated(saved: dict) -> dict:
    """A config saved in a run directory, in today's keys (each of `STEPS` in turn); today's comes back as it is."""
    for step in STEPS:
        saved = step(saved)
    return saved
