"""Keys only one command reads (evaluate's split and checkpoint, predict's input, bench's and
preview's groups) live in that command's config (conf/evaluate.yaml, predict.yaml, bench.yaml,
preview.yaml), not in a run's: train's config and the tree it prints hold none of them, another
command given one is told which command takes it, and a run saved when they were there still
resumes and evaluates."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from rich.console import Console

from app.cli.keys import refuse_keys_of_other_commands
from app.config import conf_dir, load, to_plain
from app.console import config_tree
from app.errors import ConfigError
from app.runs.checkpoint import saved_config
from app.runs.saved import resumed_config
from app.schema import (
    COMMAND_KEYS,
    BenchCommandConfig,
    Config,
    EvaluateConfig,
    PredictConfig,
    PreviewCommandConfig,
    register,
)

register()
SAVED = Path(__file__).resolve().parent / "saved"
# A run's config as runs saved it while the command keys were part of every config.
OLD = SAVED / "run_config_with_command_keys.json"
# ... and after evaluate's and predict's left, while bench's and preview's groups were still in it.
WITH_BENCH = SAVED / "run_config_with_bench_and_preview.json"


def composed(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(name, overrides=list(overrides))


def printed(plain: dict) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(config_tree(plain))
    return console.export_text()


def test_train_config_and_its_tree_hold_no_command_key():
    assert COMMAND_KEYS == ("bench", "checkpoint", "export", "input", "predict", "prepare", "preview", "split",
                            "thresholds")
    plain = to_plain(composed("config"))
    assert not set(COMMAND_KEYS) & set(plain) and OmegaConf.get_type(composed("config")) is Config
    tree = printed(plain)
    shown = re.compile(rf"(── |\s)({'|'.join(COMMAND_KEYS)})(:|$)", re.MULTILINE)  # a branch, or a key
    assert "seed: 0" in tree and not shown.search(tree)
    # negative control: the same tree over evaluate's and bench's configs does show their keys
    assert "split: val" in printed(to_plain(composed("evaluate")))
    bench = printed(to_plain(composed("bench")))
    assert "warmup: 3" in bench and shown.search(bench).group(2) == "bench"
    for override in ("split=test", "bench.batches=2", "preview.images=2"):
        with pytest.raises(ConfigCompositionException, match=override.split("=")[0]):
            composed("config", override)


def test_evaluate_and_predict_compose_their_own_keys_over_the_common_ones():
    evaluate = composed("evaluate", "split=test", "checkpoint=best", "experiment=cifar_resnet")
    assert OmegaConf.get_type(evaluate) is EvaluateConfig
    assert (evaluate.split, evaluate.checkpoint, evaluate.data.batch_size) == ("test", "best", 128)
    predict = composed("predict", "input=/some/images")
    assert OmegaConf.get_type(predict) is PredictConfig and predict.input == "/some/images"
    with pytest.raises(ConfigCompositionException, match="input"):  # each command its own
        composed("evaluate", "input=/some/images")


def test_bench_and_preview_compose_and_load_their_own_groups():
    bench = composed("bench", "bench.modes=[loader]", "data.batch_size=8")
    assert OmegaConf.get_type(bench) is BenchCommandConfig and "preview" not in bench
    loaded = load(bench)  # typed under bench's root, its group kept
    assert type(loaded) is BenchCommandConfig and loaded.bench.modes == ["loader"] and loaded.data.batch_size == 8
    preview = load(composed("preview", "preview.images=2"))
    assert type(preview) is PreviewCommandConfig and preview.preview.images == 2
    with pytest.raises(ConfigCompositionException, match="preview"):  # each command its own
        composed("bench", "preview.images=2")


def test_another_commands_key_is_refused_naming_that_command():
    for word, argv in [("bench", ["bench.modes=[loader]"]), ("preview", ["preview.images=2"]),
                       ("evaluate", ["split=test", "checkpoint=best"]), ("predict", ["input=x.png"]),
                       ("train", ["data.batch_size=8", "-m", "seed=1,2"])]:
        refuse_keys_of_other_commands(argv, word)  # negative control: each command's own keys pass
    with pytest.raises(ConfigError, match=re.escape("`bench.modes` is read by `python -m app bench` only: train's "
                                                    "config has no `bench`")) as refused:
        refuse_keys_of_other_commands(["data.batch_size=8", "+bench.modes=[loader]"], "train")
    assert str(refused.value).endswith("python -m app bench bench.modes=[loader]")  # the fix, `+` taken off
    with pytest.raises(ConfigError, match=re.escape("python -m app evaluate resume=<run dir> split=test")):
        refuse_keys_of_other_commands(["split=test"], "train")
    with pytest.raises(ConfigError, match=re.escape("`preview` is read by `python -m app preview` only: bench's")):
        refuse_keys_of_other_commands(["preview=default"], "bench")
    refuse_keys_of_other_commands(["prepare.out=copy", "prepare.format=raw"], "prepare")  # negative control
    refuse_keys_of_other_commands(["checkpoint=best", "export.format=onnx"], "export")  # negative control
    with pytest.raises(ConfigError, match=re.escape("`checkpoint` is read by `python -m app evaluate` and `python -m "
                                                    "app export` only: predict's")):
        refuse_keys_of_other_commands(["checkpoint=best"], "predict")
    with pytest.raises(ConfigError, match=re.escape("python -m app export resume=<run dir> export.format=onnx")):
        refuse_keys_of_other_commands(["export.format=onnx"], "evaluate")
    with pytest.raises(ConfigError, match=re.escape("python -m app prepare prepare.out=copy")):
        refuse_keys_of_other_commands(["prepare.out=copy"], "train")


@pytest.mark.parametrize(("saved", "held", "command", "own"), [
    (OLD, {"bench", "checkpoint", "input", "preview", "split"}, "evaluate", "split=test"),
    (WITH_BENCH, {"bench", "preview"}, "predict", "input=x.png")], ids=["every command's keys", "bench's, preview's"])
def test_a_run_saved_with_command_keys_resumes_and_evaluates(saved, held, command, own, tmp_path):
    old = json.loads(saved.read_text())
    assert set(COMMAND_KEYS) & set(old) == held
    with pytest.raises(ConfigError, match="is not allowed: no such key"):  # negative control: as saved, refused
        load(old)
    state = tmp_path / "checkpoints" / "step-00000001"
    state.mkdir(parents=True)
    (state / "state.json").write_text(json.dumps({"config": old}))
    trained = load(resumed_config(saved_config(tmp_path), composed("config", "trainer.epochs=3"), ["trainer.epochs=3"]))
    assert trained.trainer.epochs == 3 and trained.data.num_images == 40 and type(trained) is Config
    asked = composed(command, f"resume={tmp_path}", own, "queue.workers=0")
    opened = load(resumed_config(saved_config(tmp_path), asked, [f"resume={tmp_path}", own, "queue.workers=0"],
                                 ("queue.",)))
    assert opened.queue.workers == 0 and not set(COMMAND_KEYS) & set(to_plain(opened))
