"""Config keys that changed: an override naming a replaced key is refused with the new one's
name (`refuse_moved_keys`), one naming a key of another command's own config with that command
(`refuse_keys_of_other_commands`), and a config saved in a run directory with old keys is read
back in today's (`migrated`), so every old run still resumes, evaluates and predicts.

Each change of keys is one step of `STEPS`: a function from a saved config (plain dicts, as
state.json holds it) to the same config in newer keys, returning it unchanged when it does not
apply. Steps run in order, oldest change first; a new change of keys adds its step at the end.
Never imports TensorFlow, Keras, the loader or the commands.
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf

from app.config import conf_dir
from app.errors import ConfigError, config_error
from app.overrides import key_of, parsed, value_of
from app.schema import COMMAND_KEYS, COMMAND_OF, TARGETS, option_of

# The commands that work on a finished run (`resume=<run dir>`), writing into <run dir>/<command>/.
ON_A_RUN = ("evaluate", "predict", "export")

# key that was replaced → what to write instead (the message of a refused override)
MOVED = {"trainer.lr": "optimizer.learning_rate=<the peak learning rate> (conf/scheduler shapes it over the run)",
         "trainer.optimizer": "optimizer=adam|adamw|sgd|rmsprop|lion (conf/optimizer), or any Keras optimizer "
                              "with optimizer._target_=keras.optimizers.<Name>",
         "trainer.mixed_precision": "trainer.precision=mixed_float16 (or mixed_bfloat16, or float32)"}


def refuse_moved_keys(argv: list[str]) -> None:
    """A ConfigError for the first override of a key that was replaced, naming its successor."""
    for arg in argv:
        if key_of(arg) in MOVED:
            raise ConfigError(f"config key `{key_of(arg)}` was replaced: use {MOVED[key_of(arg)]}.")


def renamed_choosers(argv: list[str]) -> list[str]:
    """`data.name=X`, `scheduler.name=X`, `logger.name=X` (the old way to choose those, before every
    group chose by `_target_`) as the group choice `data=X`, with a deprecation message that names it."""
    out = list(argv)
    for group, targets in TARGETS.items():
        old = f"{group}.name"
        value = value_of(out, old)
        if value is None:
            continue
        out = [arg for arg in out if key_of(arg) != old]
        unknown = [v for v in value.split(",") if v not in targets]
        if unknown:
            raise config_error(old, value, f"one of {', '.join(targets)}; choose with {group}=<option> "
                               f"(`{old}` is deprecated: every group is chosen by its option, and its node "
                               f"names what it builds by `_target_`)")
        chosen = value_of(out, group)
        if chosen is not None and chosen != value:
            raise ConfigError(f"config keys `{group}={chosen}` and `{old}={value}` choose two {group} options: "
                              f"keep `{group}=`, `{old}` is its deprecated spelling.")
        print(f"`{old}={value}` is deprecated: use `{group}={value}` (each group is chosen by its option; "
              f"the node's `_target_` names what it builds).", file=sys.stderr)
        out += [] if chosen is not None else [f"{group}={value}"]
    return out


def refuse_keys_of_other_commands(argv: list[str], word: str) -> None:
    """A ConfigError for the first override of a key that another command's own config holds
    (bench.*, preview.*, export.*, split, checkpoint, input), naming the command that takes it."""
    for key, value in filter(None, map(parsed, argv)):
        top = key.split(".", 1)[0]
        owners = COMMAND_OF.get(top, ())
        if owners and word not in owners:
            owner = owners[0]
            how = "on a run: python -m app {} resume=<run dir> {}" if owner in ON_A_RUN else \
                "with your other overrides: python -m app {} {}"
            readers = " and ".join(f"`python -m app {o}`" for o in owners)
            raise ConfigError(f"config key `{key}` is read by {readers} only: {word}'s config has no "
                              f"`{top}` (a training run's config never holds it). Give it to that command, "
                              + how.format(owner, f"{key}={value}"))


def _precision(saved: dict) -> dict:
    """trainer.mixed_precision (a bool) became trainer.precision."""
    trainer = dict(saved.get("trainer") or {})
    if "mixed_precision" not in trainer:
        return saved
    trainer["precision"] = "mixed_float16" if trainer.pop("mixed_precision") else "float32"
    return {**saved, "trainer": trainer}


def _optimizer(saved: dict) -> dict:
    """trainer.optimizer and trainer.lr became the optimizer group: that preset of conf/optimizer
    with trainer.lr as its learning rate, under a constant schedule (what such a run trained with)."""
    trainer = dict(saved.get("trainer") or {})
    if "optimizer" in saved or not {"optimizer", "lr"} & set(trainer):
        return saved
    name = trainer.pop("optimizer", "adam")
    preset = OmegaConf.to_container(OmegaConf.load(conf_dir() / "optimizer" / f"{name}.yaml"))
    preset.pop("defaults", None)
    preset["learning_rate"] = trainer.pop("lr", preset["learning_rate"])
    return {**saved, "trainer": trainer, "optimizer": preset, "scheduler": {"name": "constant"}}


def _without_command_keys(saved: dict) -> dict:
    """Each command's own keys left the run's config: evaluate's and predict's (split, checkpoint,
    input), then bench's and preview's groups (COMMAND_KEYS names them all)."""
    return {key: value for key, value in saved.items() if key not in COMMAND_KEYS}


def _chosen_by_target(saved: dict) -> dict:
    """data, scheduler and logger chose their option by `name`; like model and optimizer, they now
    name what builds them by `_target_`."""
    out = dict(saved)
    for group, targets in TARGETS.items():
        node = saved.get(group)
        if isinstance(node, dict) and "name" in node and "_target_" not in node and node["name"] in targets:
            out[group] = {"_target_": targets[node["name"]], **{k: v for k, v in node.items() if k != "name"}}
    return out


def _loggers_by_option(saved: dict) -> dict:
    """logger was one node, its `_target_` the run's one writer; now several loggers may be chosen
    (`logger=[tensorboard,mlflow]`), each its node under its option's name, none for `logger=none`."""
    node = saved.get("logger")
    option = option_of("logger", node.get("_target_")) if isinstance(node, dict) else None
    if option is None:
        return saved
    return {**saved, "logger": {} if option == "none" else {option: dict(node)}}


# oldest change first; a change of keys adds its step here
STEPS = (_precision, _optimizer, _without_command_keys, _chosen_by_target, _loggers_by_option)


def migrated(saved: dict) -> dict:
    """A config saved in a run directory, in today's keys (each step of `STEPS` in turn); a
    config in today's keys comes back as it is."""
    for step in STEPS:
        saved = step(saved)
    return saved
