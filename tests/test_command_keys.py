"""Keys only one command reads (evaluate's split and checkpoint, predict's input) live in that
command's config (conf/evaluate.yaml, conf/predict.yaml), not in a run's: train's config and the
tree it prints hold none of them, and a run saved when they were there still resumes and evaluates."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from rich.console import Console

from app.config import conf_dir, load, to_plain
from app.console import config_tree
from app.errors import ConfigError
from app.schema import COMMAND_KEYS, Config, EvaluateConfig, PredictConfig, register
from app.training.checkpoint import saved_config
from app.training.resume import resumed_config

register()
# A run's config as runs saved it while the command keys were part of every config.
OLD = Path(__file__).resolve().parent / "saved" / "run_config_with_command_keys.json"


def composed(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(name, overrides=list(overrides))


def printed(plain: dict) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(config_tree(plain))
    return console.export_text()


def test_train_config_and_its_tree_hold_no_command_key():
    assert COMMAND_KEYS == ("checkpoint", "input", "split")
    plain = to_plain(composed("config"))
    assert not set(COMMAND_KEYS) & set(plain) and OmegaConf.get_type(composed("config")) is Config
    tree = printed(plain)
    assert "seed: 0" in tree and not any(f"{key}:" in tree for key in COMMAND_KEYS)
    # negative control: the same tree over evaluate's config does show its keys
    assert "split: val" in printed(to_plain(composed("evaluate")))
    with pytest.raises(ConfigCompositionException, match="split"):
        composed("config", "split=test")


def test_evaluate_and_predict_compose_their_own_keys_over_the_common_ones():
    evaluate = composed("evaluate", "split=test", "checkpoint=best", "experiment=cifar_resnet")
    assert OmegaConf.get_type(evaluate) is EvaluateConfig
    assert (evaluate.split, evaluate.checkpoint, evaluate.data.batch_size) == ("test", "best", 128)
    predict = composed("predict", "input=/some/images")
    assert OmegaConf.get_type(predict) is PredictConfig and predict.input == "/some/images"
    with pytest.raises(ConfigCompositionException, match="input"):  # each command its own
        composed("evaluate", "input=/some/images")


def test_a_run_saved_with_command_keys_resumes_and_evaluates(tmp_path):
    old = json.loads(OLD.read_text())
    assert {"input", "split", "checkpoint"} <= set(old)
    with pytest.raises(ConfigError, match="`input` is not allowed"):  # negative control: as saved, refused
        load(old)
    state = tmp_path / "checkpoints" / "step-00000001"
    state.mkdir(parents=True)
    (state / "state.json").write_text(json.dumps({"config": old}))
    trained = load(resumed_config(saved_config(tmp_path), composed("config", "trainer.epochs=3"), ["trainer.epochs=3"]))
    assert trained.trainer.epochs == 3 and trained.data.num_images == 40
    asked = composed("evaluate", f"resume={tmp_path}", "split=test", "queue.workers=0")
    evaluated = load(resumed_config(saved_config(tmp_path), asked, [f"resume={tmp_path}", "split=test",
                                                                     "queue.workers=0"], ("queue.",)))
    assert evaluated.queue.workers == 0 and not set(COMMAND_KEYS) & set(to_plain(evaluated))
