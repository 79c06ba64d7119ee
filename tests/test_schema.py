"""The schema's defaults against the YAML files in conf/ that extend it: one source of truth."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from omegaconf import OmegaConf

from app.config import conf_dir, load, to_plain
from app.schema import (
    DATA_SCHEMAS,
    MODEL_SCHEMAS,
    SCHEMAS,
    AugmentConfig,
    BenchCommandConfig,
    Config,
    DataConfig,
    ExportCommandConfig,
    FolderDataConfig,
    KerasAppConfig,
    ModelConfig,
    PrepareCommandConfig,
    PreviewCommandConfig,
)
from app.schema.training import CsvLoggerConfig, LoggerConfig, MlflowLoggerConfig, TensorBoardLoggerConfig


def _default(f: dataclasses.Field):
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    value = getattr(value, "value", value)  # an enum member: its name in YAML
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


# the schema's defaults; the group's other files are presets
PRESETS = {"optimizer": "adam", "scheduler": "constant"}
CASES = [(schema, conf_dir() / group / path.name) for group, schema in SCHEMAS.items() if group != "logger"
         for path in sorted((conf_dir() / group).glob("*.yaml"))
         if not (schema is AugmentConfig and path.stem != "none")  # augment/default.yaml is a preset list
         and not (group in PRESETS and path.stem != PRESETS[group])]
CASES += [(schema, conf_dir() / "data" / f"{name}.yaml") for name, schema in DATA_SCHEMAS.items()]
CASES += [(schema, conf_dir() / "model" / f"{name}.yaml") for name, schema in MODEL_SCHEMAS.items()]


@pytest.mark.parametrize(("schema", "path"), CASES, ids=[f"{p.parent.name}/{p.stem}" for _, p in CASES])
def test_schema_defaults_equal_the_yaml(schema, path):
    yaml = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    yaml.pop("defaults")
    fields = {f.name: f for f in dataclasses.fields(schema)}
    assert set(yaml) <= set(fields), set(yaml) - set(fields)
    for key, value in yaml.items():
        default = _default(fields[key])
        assert value == default, f"{path.name}: {key} is {value!r} in YAML, {default!r} in {schema.__name__}"


LOGGERS = {"tensorboard": TensorBoardLoggerConfig, "csv": CsvLoggerConfig, "mlflow": MlflowLoggerConfig}


@pytest.mark.parametrize("option", sorted(LOGGERS))
def test_each_logger_file_is_its_schema_under_its_name(option):
    """conf/logger: each option's node under its own name (several go together), its schema's defaults."""
    yaml = OmegaConf.to_container(OmegaConf.load(conf_dir() / "logger" / f"{option}.yaml"))
    assert list(yaml) == [option] and yaml[option] == dataclasses.asdict(LOGGERS[option]())
    assert typing.get_args(typing.get_type_hints(LoggerConfig)[option])[0] is LOGGERS[option]
    assert {f.name for f in dataclasses.fields(LoggerConfig)} == set(LOGGERS)
    assert OmegaConf.load(conf_dir() / "logger" / "none.yaml") in ({}, None)  # logger=none: no node


def test_root_groups_are_typed_by_their_schemas():
    """Config says each group's shape: a group with one schema a choice (data, model) is typed by
    the schema they all extend, and a composed or loaded config carries the chosen one."""
    hints = typing.get_type_hints(Config)
    groups = {"data", "augment", "queue", "model", "optimizer", "scheduler", "trainer", "logger"}
    assert {name for name, hint in hints.items() if dataclasses.is_dataclass(hint)} == groups
    assert hints["data"] is DataConfig and all(issubclass(s, DataConfig) for s in DATA_SCHEMAS.values())
    assert hints["model"] is ModelConfig and all(issubclass(s, ModelConfig) for s in MODEL_SCHEMAS.values())
    # bench's, preview's, prepare's and export's groups are their commands' roots' own
    roots = {**hints, **typing.get_type_hints(BenchCommandConfig), **typing.get_type_hints(PreviewCommandConfig),
             **typing.get_type_hints(PrepareCommandConfig), **typing.get_type_hints(ExportCommandConfig)}
    assert all(roots[group] is schema for group, schema in SCHEMAS.items())
    defaults = {group: schema() for group, schema in SCHEMAS.items() if group in hints}
    config = load(to_plain(load(OmegaConf.structured(Config(data=FolderDataConfig(path="/x"),
                                                            model=KerasAppConfig(), **defaults)))))
    assert type(config.data) is FolderDataConfig and type(config.model) is KerasAppConfig
