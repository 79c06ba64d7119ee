"""A run directory saved with old keys (trainer.optimizer, trainer.lr, trainer.mixed_precision)
is read back in today's, through the path a resume takes: state.json → migrated → load."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir

from app.config import conf_dir, load, to_plain
from app.errors import ConfigError
from app.schema import register
from app.training import checkpoint
from app.training.migrate import STEPS, migrated, refuse_moved_keys


def _saved_run(tmp_path, config: dict):
    """A run directory as an old version left it: one checkpoint whose state.json holds `config`."""
    step = tmp_path / "checkpoints" / "step-00000004"
    step.mkdir(parents=True)
    (step / "state.json").write_text(json.dumps({"epoch": 1, "step": 4, "epoch_complete": True, "config": config}))
    return tmp_path


def _old_format() -> dict:
    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        config = to_plain(compose("config"))
    config.pop("optimizer"), config.pop("scheduler")
    config["trainer"].pop("precision")
    config["trainer"].update(optimizer="sgd", lr=0.05, mixed_precision=True)
    config.update(split="val", checkpoint="last", input=None)  # evaluate's and predict's keys, in every run then
    return config


def test_an_old_run_dir_is_read_back_in_todays_keys(tmp_path):
    saved = checkpoint.saved_config(_saved_run(tmp_path, _old_format()))
    with pytest.raises(ConfigError, match="trainer"):  # negative control: as saved, today's schema refuses it
        load(saved)
    config = load(migrated(saved))
    assert config.trainer.precision == "mixed_float16"
    assert config.optimizer._target_ == "keras.optimizers.SGD" and config.optimizer.learning_rate == 0.05
    assert config.scheduler.name == "constant"
    today = to_plain(config)
    assert migrated(today) == today  # a config in today's keys is left as it is
    assert not {"split", "checkpoint", "input"} & set(migrated(saved))
    assert len(STEPS) == 3  # each step is exercised above


def test_an_override_of_a_replaced_key_names_its_successor():
    refuse_moved_keys(["optimizer.learning_rate=0.1", "-m"])  # today's keys pass
    with pytest.raises(ConfigError, match=r"`trainer.lr` was replaced: use optimizer.learning_rate"):
        refuse_moved_keys(["+trainer.lr=0.1"])
