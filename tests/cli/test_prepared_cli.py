"""data=prepared end to end: train on a prepared copy (app/data/shards.py's layout, written by
tests/prepared_copies.py) with 1 and 2 workers, the same batches and metrics; evaluate split=test;
a copy stored smaller than the transforms need refused before any work; storage_options' secrets
in no file of the run and nowhere in what it printed."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from docs_runner import spawn_one_process_for
from prepared_copies import write_copy

TESTS = Path(__file__).resolve().parents[1]
# 24 px out: RandomResizedCrop (scale 0.5) needs a short side of 40, what the copy stores
CONFIG = ["data=prepared", "data.image_size=[24,24]", "data.batch_size=4", "model.widths=[8]", "trainer.epochs=2",
          "trainer.deterministic=true", "trainer.record_samples=true"]


def _rows(run: Path, name: str, *keys: str) -> list[tuple]:
    return [tuple(row[k] for k in keys) for row in csv.DictReader((run / name).open())]


@pytest.mark.slow
def test_train_on_a_prepared_copy_is_worker_count_independent_and_evaluates_its_test_split(tmp_path):
    copy = write_copy(tmp_path / "copy", image_format="jpeg")
    one, two, test, small, secret = spawn_one_process_for(
        ["train", *CONFIG, f"data.path={copy}", "queue.workers=1", "hydra.run.dir=w1"],
        ["train", *CONFIG, f"data.path={copy}", "queue.workers=2", "hydra.run.dir=w2"],
        ["evaluate", f"resume={tmp_path / 'w2'}", "split=test", "queue.workers=1"],
        ["train", *CONFIG, f"data.path={copy}", "data.image_size=[48,48]", "hydra.run.dir=big"],
        # a local data.path reads no storage_options: they are only saved, and must be redacted
        ["train", *CONFIG, f"data.path={copy}", "trainer.epochs=1", SECRETS, "hydra.run.dir=secret"], cwd=tmp_path)
    for result in (one, two, test, secret):
        assert result.returncode == 0, result.stderr[-3000:]
    w1, w2 = tmp_path / "w1", tmp_path / "w2"
    samples = _rows(w1, "samples.csv", "indices")
    assert samples == _rows(w2, "samples.csv", "indices") and len(samples) == 12  # 24 samples, batches of 4
    assert samples[:6] != samples[6:]  # negative control: epoch 2's order is another, so equal means something
    keys = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy")
    assert _rows(w1, "metrics.csv", *keys) == _rows(w2, "metrics.csv", *keys)
    split = json.loads((w2 / "split.json").read_text())
    assert split["source"] == "prepared" and split["prepared"]["format"] == "jpeg" and split["counts"]["test"] == 6
    (out,) = (w2 / "evaluate").iterdir()
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["split"] == "test" and evaluation["samples"] == 6
    # 48 px out needs a short side of 79: refused before any work, naming both and the command that mends it
    assert small.returncode != 0
    assert "short side of 40 px" in small.stderr and "need 79 px" in small.stderr
    assert "python -m app prepare" in small.stderr and "prepare.short_side=79" in small.stderr
    assert not (tmp_path / "big" / "checkpoints").exists()
    _check_no_secret(tmp_path / "secret", secret.stdout)


SECRETS = "+data.storage_options={key: AKIAEXAMPLE, secret: s3cr3tvalue, endpoint_url: http://127.0.0.1:1}"


def _check_no_secret(run: Path, printed: str) -> None:
    """No file of `run` (.hydra/, the log, summary.json, checkpoints' state.json, TensorBoard's
    HParams) and nothing printed holds a secret; the endpoint is there: the options were saved."""
    files = [p for p in run.rglob("*") if p.is_file()]
    holding = {word: [str(p.relative_to(run)) for p in files if word.encode() in p.read_bytes()]
               for word in ("s3cr3tvalue", "AKIAEXAMPLE", "127.0.0.1")}
    assert holding["s3cr3tvalue"] == holding["AKIAEXAMPLE"] == []
    assert "s3cr3tvalue" not in printed and "AKIAEXAMPLE" not in printed and "<redacted>" in printed
    for name in (".hydra/config.yaml", ".hydra/overrides.yaml", "summary.json", "tensorboard"):
        assert any(p.startswith(name) for p in holding["127.0.0.1"]), (name, holding["127.0.0.1"])
    assert any(p.startswith("checkpoints/") and p.endswith("state.json") for p in holding["127.0.0.1"])
