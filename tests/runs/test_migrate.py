"""A run directory saved with old keys (trainer.optimizer, trainer.lr, trainer.mixed_precision)
is read back in today's, through the path a resume takes: state.json → migrated → load."""

from __future__ import annotations

import json

import hydra.utils
import pytest
from hydra import compose, initialize_config_dir

from app.cli.keys import refuse_moved_keys, renamed_choosers
from app.config import closed_target, conf_dir, load, to_plain, validate
from app.errors import ConfigError
from app.runs import checkpoint
from app.runs.migrate import STEPS, migrated
from app.schema import TARGETS, register
from app.tracking import dashboards


def _saved_run(tmp_path, config: dict):
    """A run directory as an old version left it: one checkpoint whose state.json holds `config`."""
    step = tmp_path / "checkpoints" / "step-00000004"
    step.mkdir(parents=True)
    (step / "state.json").write_text(json.dumps({"epoch": 1, "step": 4, "epoch_complete": True, "config": config}))
    return tmp_path


def _composed(*overrides: str):
    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _old_format() -> dict:
    config = to_plain(_composed())
    config.pop("optimizer"), config.pop("scheduler")
    config["trainer"].pop("precision")
    config["trainer"].update(optimizer="sgd", lr=0.05, mixed_precision=True)
    config.update(split="val", checkpoint="last", input=None)  # evaluate's and predict's keys, in every run then
    config["data"] = {"name": "synthetic", **{k: v for k, v in config["data"].items() if k != "_target_"}}
    config["logger"] = {"name": "tensorboard"}  # one logger a run; scheduler: from _optimizer
    return config


def test_an_old_run_dir_is_read_back_in_todays_keys(tmp_path):
    saved = checkpoint.saved_config(_saved_run(tmp_path, _old_format()))
    with pytest.raises(ConfigError, match="trainer"):  # negative control: as saved, today's schema refuses it
        load(saved)
    config = load(migrated(saved))
    assert config.trainer.precision == "mixed_float16"
    assert config.optimizer._target_ == "keras.optimizers.SGD" and config.optimizer.learning_rate == 0.05
    assert config.scheduler._target_ == "app.training.schedules.constant"
    assert (config.data._target_, config.logger.tensorboard._target_) == (
        "app.data.sources.synthetic.synthetic_source", "app.tracking.dashboards.TensorBoardWriter")
    assert (config.logger.csv, config.logger.mlflow) == (None, None)
    today = to_plain(config)
    assert migrated(today) == today  # a config in today's keys is left as it is
    assert not {"split", "checkpoint", "input"} & set(migrated(saved))
    assert len(STEPS) == 6  # each step is exercised above or below


def test_a_run_saved_before_app_training_was_split_names_its_loggers_where_they_are_now():
    saved = to_plain(_composed("logger=[tensorboard,csv]"))
    saved["logger"] = {name: {**node, "_target_": node["_target_"].replace("app.tracking.", "app.training.")}
                       for name, node in saved["logger"].items() if node}
    with pytest.raises(ConfigError, match="app.training.dashboards"):  # negative control: as saved, refused
        load(saved)
    config = load(migrated(saved))
    assert (config.logger.tensorboard._target_, config.logger.csv._target_) == (
        "app.tracking.dashboards.TensorBoardWriter", "app.tracking.dashboards.CsvWriter")
    # one logger a run, and before the split: both steps in turn
    single = {**saved, "logger": {"_target_": "app.training.mlflow_writer.MlflowWriter", "experiment": "x"}}
    assert migrated(single)["logger"] == {"mlflow": {"_target_": "app.tracking.mlflow_writer.MlflowWriter",
                                                     "experiment": "x"}}


def test_a_run_saved_before_app_data_was_cut_by_job_names_its_source_where_it_is_now():
    for option, old, new in (("folder", "app.data.folder.folder_source_of", "app.data.sources.folder.folder_source_of"),
                             ("prepared", "app.data.prepared.prepared_source",
                              "app.data.copies.prepared.prepared_source")):
        saved = to_plain(_composed(f"data={option}", "data.path=/somewhere"))
        saved["data"]["_target_"] = old
        with pytest.raises(Exception, match=old):  # negative control: as saved, today's schema has no such source
            load(saved)
        assert load(migrated(saved)).data._target_ == new


def test_an_override_of_a_replaced_key_names_its_successor():
    refuse_moved_keys(["optimizer.learning_rate=0.1", "-m"])  # today's keys pass
    with pytest.raises(ConfigError, match=r"`trainer.lr` was replaced: use optimizer.learning_rate"):
        refuse_moved_keys(["+trainer.lr=0.1"])


def test_the_old_way_to_choose_a_group_is_its_option_with_a_deprecation(capsys):
    """`scheduler.name=cosine` (data, scheduler and logger chose by `name`) is `scheduler=cosine`."""
    assert renamed_choosers(["scheduler.name=cosine", "model.name=Xception", "-m"]) == \
        ["model.name=Xception", "-m", "scheduler=cosine"]  # model.name is keras_app's backbone, not a chooser
    assert "`scheduler.name=cosine` is deprecated: use `scheduler=cosine`" in capsys.readouterr().err
    assert renamed_choosers(["logger.name=csv,none", "data=folder", "data.name=folder"]) == \
        ["data=folder", "logger=csv,none"]  # a sweep's values; the group given twice alike
    assert capsys.readouterr().err.count("deprecated") == 2
    today = ["scheduler=cosine", "data.path=/x"]
    assert renamed_choosers(today) == today and not capsys.readouterr().err  # negative control
    with pytest.raises(ConfigError, match=r"`scheduler=step` and `scheduler.name=cosine` choose two"):
        renamed_choosers(["scheduler=step", "scheduler.name=cosine"])
    with pytest.raises(ConfigError, match=r"`data.name`.*'imagenet'.*one of synthetic, cifar, folder"):
        renamed_choosers(["data.name=imagenet"])


def test_each_target_of_ours_is_the_callable_it_names(tmp_path):
    """What `_target_` names is what runs: a closed group's target is imported by name only when
    the schema lists it, and is the object at that dotted path."""
    for group, targets in TARGETS.items():
        for target in targets.values():
            assert callable(closed_target(group, target)) and closed_target(group, target) is \
                hydra.utils.get_object(target), (group, target)
    with pytest.raises(ConfigError, match=r"`data._target_` = 'os.system' is not allowed: one of app.data"):
        closed_target("data", "os.system")  # importable, but not ours: never imported
    with pytest.raises(ConfigError, match=r"choose it with scheduler=<constant\|cosine"):
        closed_target("scheduler", "app.training.schedules.nope")
    for option, target in TARGETS["logger"].items():
        assert type(dashboards.writer(target, tmp_path / option)) is hydra.utils.get_object(target), option
    with pytest.raises(ConfigError, match=r"`logger.csv._target_`.*app.tracking.dashboards.CsvWriter"):
        validate(to_plain(_composed("logger=csv", "logger.csv._target_=app.tracking.dashboards.Writer")))
    with pytest.raises(ConfigError, match=r"`scheduler._target_`.*choose it with scheduler=<constant\|cosine"):
        validate(to_plain(_composed("scheduler._target_=app.training.schedules.nope")))  # negative control
