"""Keys that are not today's: replaced keys and other commands' keys refused, `<group>.name=X` read as `<group>=X`."""

from __future__ import annotations

import sys

from omegaconf import DictConfig, OmegaConf

from app.errors import ConfigError, config_error
from app.overrides import key_of, parsed, value_of
from app.schema import COMMAND_OF, DATA_SCHEMAS, TARGETS

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
    """`<group>.name=X` read as `<group>=X`, with a deprecation; refused for an unknown X or another `<group>=`."""
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
    """A ConfigError for the first override of a key only another command's config holds, naming that command."""
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


def of_some_data_group(key: str) -> bool:
    """Whether some data option's schema holds `key` (data.patches.level), or a mapping of free keys above it."""
    if not key.startswith("data."):
        return False
    return any(_holds(OmegaConf.structured(schema), key.split(".")[1:]) for schema in DATA_SCHEMAS.values())


def _holds(node, parts: list[str]) -> bool:
    for part in parts:
        if not isinstance(node, DictConfig):
            return False
        if OmegaConf.get_type(node) is dict:  # free keys (storage_options): any key may be there
            return True
        if part not in node.keys():
            return False
        node = OmegaConf.select(node, part, throw_on_missing=False)
    return True
