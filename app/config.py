"""Config checked before any data or model: `typed` (schemas), `validate` (+ ranges, cross-key rules), `load` (both)."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from app import rules
from app.errors import ConfigError, config_error
from app.redact import OPTIONS, dropped_note, without_redacted
from app.schema import SCHEMAS, TARGETS, Config, data_schema, model_schema

log = logging.getLogger("app.config")


def conf_dir() -> Path:
    """conf/ at the top of a source checkout (editable install), else the copy shipped in the package."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "conf", here / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise ConfigError(f"no conf/config.yaml found next to {here}: the installation is incomplete")


def closed_target(group: str, target: str) -> Any:
    """What a closed group's `_target_` names (app/schema says why); a ConfigError with options if TARGETS lacks it."""
    from hydra.utils import get_object  # Hydra's utilities: imported here, beside instantiate_each's

    if target not in TARGETS[group].values():
        raise config_error(f"{group}._target_", target, f"one of {', '.join(TARGETS[group].values())}: choose it "
                           f"with {group}=<{'|'.join(TARGETS[group])}>")
    return get_object(target)


def instantiate_each(specs: list, key: str, base: type, example: str, **kwargs: Any) -> list:
    """Each `_target_` mapping in list `key` built with `kwargs`, must be a `base`; errors name `key[i]`, `example`."""
    from hydra.utils import instantiate

    built = []
    for i, spec in enumerate(specs):
        where = f"{key}[{i}]"
        if not isinstance(spec, dict) or "_target_" not in spec:
            raise config_error(where, spec, f"each entry is a mapping with `_target_: {example}` and its arguments")
        try:
            obj = instantiate(spec, _convert_="all", **kwargs)
        except Exception as error:  # instantiate wraps import errors and the target's own ValueError
            detail = " ".join(str(error.__cause__ or error).split())
            raise ConfigError(f"config key `{where}` ({spec['_target_']}) cannot be built: {detail}") from None
        if not isinstance(obj, base):
            raise config_error(f"{where}._target_", spec["_target_"], f"it is not a {base.__module__}.{base.__name__}")
        built.append(obj)
    return built


def typed(cfg: DictConfig | dict, root: type | None = None) -> DictConfig:
    """`cfg` on its groups' schemas (`root`, else its own, else Config): unknown keys refused, missing ones default."""
    base = root or _root_of(cfg)
    plain = to_plain(cfg) if isinstance(cfg, DictConfig) else cfg
    known = [f.name for f in dataclasses.fields(base)]
    for key in plain:
        if key not in known:
            raise ConfigError(f"config key `{key}` is not allowed: no such key. Allowed keys there: "
                              f"{', '.join(known)}.")
    root = OmegaConf.structured(base)
    for key, value in plain.items():
        schema = _schema_of(key, value)
        if schema is None or not isinstance(value, dict):
            root[key] = value
            continue
        try:
            root[key] = OmegaConf.merge(OmegaConf.structured(schema), value)
        except OmegaConfBaseException as error:
            full = f"{key}.{error.full_key}" if getattr(error, "full_key", None) else key
            where = getattr(error, "object_type", None)
            where = where if where is not None and dataclasses.is_dataclass(where) else schema
            names = ", ".join(f.name for f in dataclasses.fields(where))
            first = str(error).splitlines()[0]
            raise ConfigError(f"config key `{full}` is not allowed: {first}. Allowed keys there: {names}.") from None
    return root


def _root_of(cfg: DictConfig | dict) -> type:
    """The root schema a composed config carries (a command's own extends Config), else Config."""
    schema = OmegaConf.get_type(cfg) if isinstance(cfg, DictConfig) else None
    return schema if isinstance(schema, type) and issubclass(schema, Config) else Config


def _schema_of(key: str, value: Any) -> type | None:
    """The schema of a top-level node: data's and model's by its `_target_`."""
    if not isinstance(value, dict):
        return None
    if key == "data":
        return data_schema(value.get("_target_"))
    if key == "model":
        target = str(value.get("_target_"))
        if target.startswith("keras.applications."):
            raise config_error("model._target_", target, f"a keras.applications model comes with its own top, "
                               f"classes and weights download: use `model=keras_app "
                               f"model.name={target.rsplit('.', 1)[-1]}` (no top, a new head, its normalisation)")
        return model_schema(target)
    return SCHEMAS.get(key)


def validate(cfg: DictConfig | dict, root: type | None = None) -> DictConfig:
    """The config, typed, after the ranges and cross-key rules the types alone cannot express; raises ConfigError."""
    cfg = typed(cfg, root)
    _resolve_backend(cfg)
    rules.check(cfg)
    return cfg


def _resolve_backend(cfg: DictConfig) -> None:
    """`trainer.backend=auto` made the installed framework, so a run records its backend; else left `auto`."""
    trainer = cfg.get("trainer")
    if trainer is not None and trainer.backend == "auto" and (found := installed_backend()):
        trainer.backend = found


def installed_backend() -> str | None:
    """TensorFlow where it is installed, else JAX, else None: looks for the packages, imports neither."""
    return next((name for name in ("tensorflow", "jax") if importlib.util.find_spec(name) is not None), None)


def load(cfg: DictConfig | dict, root: type | None = None) -> Config:
    """The config validated once into the typed object every stage reads; a REDACTED secret not given again left out."""
    cfg = validate(cfg, root)
    _drop_redacted(cfg)
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


def _drop_redacted(cfg: DictConfig) -> None:
    """Each group's storage_options without their REDACTED values: REDACTED is no credential, the environment's are."""
    dropped = []
    for group in list(cfg.keys()):
        node = cfg[group]
        if not isinstance(node, DictConfig) or not isinstance(node.get(OPTIONS), DictConfig):
            continue
        options = OmegaConf.to_container(node[OPTIONS], resolve=False)
        kept, gone = without_redacted(options, f"{group}.{OPTIONS}")
        if gone:
            node[OPTIONS], dropped = kept, dropped + gone
    if dropped:
        log.info("%s", dropped_note(dropped))


def to_plain(cfg: DictConfig | Config) -> dict:
    """The config as plain containers, interpolations resolved, enums as names (a run's JSON files, a sweep job)."""
    if dataclasses.is_dataclass(cfg):
        cfg = OmegaConf.structured(cfg)
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]
