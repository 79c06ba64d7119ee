"""data=prepared end to end: train on a prepared copy (app/data/shards.py's layout, written by
tests/prepared_copies.py) with a corrupt member in its train and test splits: with 1 and 2
workers and data.on_bad_sample=skip, the same batches and metrics and the member listed by shard
and key; `raise` stops naming it; evaluate split=test leaves its bad member out and names it (the
`mark` policy); a copy stored smaller than the transforms need refused before any work."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from docs_runner import spawn_one_process_for
from prepared_copies import corrupt_member, write_copy

TESTS = Path(__file__).resolve().parents[1]
# 24 px out: RandomResizedCrop (scale 0.5) needs a short side of 40, what the copy stores
CONFIG = ["data=prepared", "data.image_size=[24,24]", "data.batch_size=4", "model.widths=[8]", "trainer.epochs=2",
          "trainer.deterministic=true", "trainer.record_samples=true"]


def _rows(run: Path, name: str, *keys: str) -> list[tuple]:
    return [tuple(row[k] for k in keys) for row in csv.DictReader((run / name).open())]


@pytest.mark.slow
def test_train_on_a_prepared_copy_is_worker_count_independent_follows_the_bad_sample_policy_and_evaluates(tmp_path):
    copy = write_copy(tmp_path / "copy", image_format="jpeg")
    bad_train, bad_test = corrupt_member(copy, "train", 5), corrupt_member(copy, "test", 2)
    skip = ["data.on_bad_sample=skip", "data.max_bad_fraction=0.1"]
    one, two, test, predicted, small, stopped = spawn_one_process_for(
        ["train", *CONFIG, *skip, f"data.path={copy}", "queue.workers=1", "hydra.run.dir=w1"],
        ["train", *CONFIG, *skip, f"data.path={copy}", "queue.workers=2", "hydra.run.dir=w2"],
        ["evaluate", f"resume={tmp_path / 'w2'}", "split=test", "queue.workers=1"],
        ["predict", f"resume={tmp_path / 'w2'}", f"input={copy}", "queue.workers=1"],
        ["train", *CONFIG, f"data.path={copy}", "data.image_size=[48,48]", "hydra.run.dir=big"],
        ["train", *CONFIG, f"data.path={copy}", "queue.workers=1", "hydra.run.dir=raise"], cwd=tmp_path)
    for result in (one, two, test, predicted):
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Traceback" not in result.stderr
    w1, w2 = tmp_path / "w1", tmp_path / "w2"
    samples = _rows(w1, "samples.csv", "indices")
    assert samples == _rows(w2, "samples.csv", "indices") and len(samples) == 12  # 24 samples, batches of 4
    assert samples[:6] != samples[6:]  # negative control: epoch 2's order is another, so equal means something
    keys = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy")
    assert _rows(w1, "metrics.csv", *keys) == _rows(w2, "metrics.csv", *keys)
    for run in (w1, w2):  # skip: the one bad member listed, by its shard and key, the others read
        listed = [line.split("\t") for line in (run / "bad_samples.txt").read_text().splitlines()]
        assert [row[:3] for row in listed] == [["train", "5", bad_train]], listed
    split = json.loads((w2 / "split.json").read_text())
    assert split["source"] == "prepared" and split["prepared"]["format"] == "jpeg" and split["counts"]["test"] == 6
    (out,) = (w2 / "evaluate").iterdir()
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["split"] == "test" and evaluation["samples"] == 5  # the bad member left out (mark) ...
    assert [u["path"] for u in evaluation["unreadable"]] == [bad_test]  # ... and named
    assert "1 of 6 test files could not be read and were left out" in test.stdout
    # predict on the copy's own samples: every split in turn, each row named by its shard and member
    (out,) = (w2 / "predict").iterdir()
    rows = list(csv.DictReader((out / "predictions.csv").open()))
    assert len(rows) == 24 + 9 + 6 and "37 images:" in predicted.stdout
    assert [row["path"].rsplit(" ", 1)[1] for row in rows[:2]] == ["train-000000000.jpg", "train-000000001.jpg"]
    assert rows[-1]["path"].endswith("member test-000000005.jpg") and "/test-0000" in rows[-1]["path"]
    assert [row["path"] for row in rows if row["error"]] == [bad_train, bad_test]  # listed, without numbers
    assert all(abs(sum(float(row[f"class{c}"]) for c in range(3)) - 1) < 1e-4 for row in rows if not row["error"])
    # raise (the default): one paragraph naming the shard and member, the run failed
    assert stopped.returncode == 1 and "Traceback" not in stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sample 5 of the train split") and f"({bad_train})" in last, last
    assert "data.on_bad_sample=skip" in last
    assert json.loads((tmp_path / "raise" / "summary.json").read_text())["status"] == "failed"
    # 48 px out needs a short side of 79: refused before any work, naming both and the command that mends it
    assert small.returncode != 0
    assert "short side of 40 px" in small.stderr and "need 79 px" in small.stderr
    assert "python -m app prepare" in small.stderr and "prepare.short_side=79" in small.stderr
    assert not (tmp_path / "big" / "checkpoints").exists()
