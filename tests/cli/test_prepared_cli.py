"""data=prepared end to end: train on a prepared copy (app/data/copies/shards.py's layout, written by
tests/prepared_copies.py) with a corrupt member in its train and test splits, with 1 and 2
workers and data.on_bad_sample=skip: the same batches and metrics, in a local folder and at an
s3:// URL (moto's server on localhost, as the CLI reaches any S3: the standard AWS variables),
with and without a shard cache, the bad member listed by shard and key; `raise` stops naming it;
evaluate split=test leaves its bad member out and names it (the `mark` policy); predict on the
copy's samples; a run on the S3 copy SIGKILLed inside an epoch and resumed, the same as
uninterrupted (its samples, metrics and weights); a copy stored smaller than the transforms need,
a missing bucket and a URL for a folder source refused before any work; storage_options' secrets
(used to reach the S3 copy) in no file of the run and nowhere in what it printed."""

from __future__ import annotations

import csv
import io
import json
import os
import zipfile
from pathlib import Path

import h5py
import pytest
import s3fs
from docs_runner import spawn_one_process_for, train_killed
from prepared_copies import corrupt_member, write_copy
from s3_endpoint import CREDENTIALS, endpoint, environment, new_bucket

TESTS = Path(__file__).resolve().parents[1]
# 24 px out: RandomResizedCrop (scale 0.5) needs a short side of 40, what the copy stores
CONFIG = ["data=prepared", "data.image_size=[24,24]", "data.batch_size=4", "model.widths=[8]", "trainer.epochs=2",
          "trainer.deterministic=true", "trainer.record_samples=true"]


SKIP = ["data.on_bad_sample=skip", "data.max_bad_fraction=0.1"]


def _rows(run: Path, name: str, *keys: str) -> list[tuple]:
    return [tuple(row[k] for k in keys) for row in csv.DictReader((run / name).open())]


def _weights(checkpoint: Path) -> dict[str, bytes]:
    """Every variable a checkpoint's model.keras holds (the model's and the optimizer's, its step
    count included), as bytes, read with h5py: no Keras in this process."""
    with zipfile.ZipFile(checkpoint / "model.keras") as archive, \
            h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as weights:
        found = {}
        weights.visititems(lambda name, item: found.update({name: item[()].tobytes()})
                           if isinstance(item, h5py.Dataset) else None)
    assert found
    return found


def _uploaded(copy: Path) -> str:
    """The copy put in a new bucket of the endpoint; its s3:// URL."""
    fs = s3fs.S3FileSystem(key=CREDENTIALS["AWS_ACCESS_KEY_ID"], secret=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                           endpoint_url=endpoint(), skip_instance_cache=True)
    bucket = new_bucket(fs)
    fs.put(str(copy), f"{bucket}/copy", recursive=True)
    return f"s3://{bucket}/copy"


def _killed_inside_epoch_2(url: str, cwd: Path, env: dict) -> list[str]:
    """A run on the S3 copy SIGKILLed as epoch 2's fourth step begins, after its checkpoint at step 8
    (inside the epoch); the config that, uninterrupted, it must equal once resumed."""
    config = [*CONFIG, *SKIP, f"data.path={url}", "queue.workers=2", "trainer.checkpoint_every_steps=2"]
    train_killed(config, cwd=cwd, env=env)
    return config


@pytest.mark.slow
def test_train_on_a_prepared_copy_is_worker_count_and_storage_independent_follows_the_policy_and_resumes(tmp_path):
    copy = write_copy(tmp_path / "copy", image_format="jpeg")
    bad_train, bad_test = corrupt_member(copy, "train", 5), corrupt_member(copy, "test", 2)
    url = _uploaded(copy)
    env = {**os.environ, **environment(), "PYTHONPATH": str(TESTS)}  # the server lives in this process
    s3_config = _killed_inside_epoch_2(url, tmp_path, env)
    two, test, predicted, small, stopped, cached, s3, s3_test, resumed, missing, folder = spawn_one_process_for(
        ["train", *CONFIG, *SKIP, f"data.path={copy}", "queue.workers=2", "hydra.run.dir=w2"],
        ["evaluate", f"resume={tmp_path / 'w2'}", "split=test", "queue.workers=1"],
        ["predict", f"resume={tmp_path / 'w2'}", f"input={copy}", "queue.workers=1"],
        ["train", *CONFIG, f"data.path={copy}", "data.image_size=[48,48]", "hydra.run.dir=big"],
        ["train", *CONFIG, f"data.path={copy}", "queue.workers=1", "hydra.run.dir=raise"],
        ["train", *CONFIG, *SKIP, f"data.path={url}", "queue.workers=1", f"data.cache_dir={tmp_path / 'cache'}",
         secrets(endpoint()), "hydra.run.dir=s1"],
        ["train", *s3_config, "hydra.run.dir=s2"],
        ["evaluate", f"resume={tmp_path / 's2'}", "split=test", "queue.workers=2"],
        ["train", f"resume={tmp_path / 'killed'}"],
        ["train", *CONFIG, "data.path=s3://no-such-bucket-here/copy", "hydra.run.dir=missing"],
        ["train", "data=folder", "data.path=s3://bucket/images", "hydra.run.dir=folder"], cwd=tmp_path, env=env)
    for result in (two, test, predicted, cached, s3, s3_test, resumed):
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Traceback" not in result.stderr
    # 1 worker (s1) and 2 (w2, s2), a local folder (w2) and S3 (s1 cached, s2 by ranges), resumed (killed)
    runs = {name: tmp_path / name for name in ("w2", "s1", "s2", "killed")}
    samples = _rows(runs["w2"], "samples.csv", "indices")
    assert len(samples) == 12  # 24 samples, batches of 4
    assert samples[:6] != samples[6:]  # negative control: epoch 2's order is another, so equal means something
    keys = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy")
    for name, run in runs.items():
        assert _rows(run, "samples.csv", "indices") == samples, name
        assert _rows(run, "metrics.csv", *keys) == _rows(runs["w2"], "metrics.csv", *keys), name
        # skip: the one bad member listed, by its shard (local or at the URL) and key, the others read
        listed = [line.split("\t") for line in (run / "bad_samples.txt").read_text().splitlines()]
        where = bad_train if name == "w2" else bad_train.replace(str(copy), url)
        assert [row[:3] for row in listed] == [["train", "5", where]], (name, listed)
    assert (runs["killed"] / "samples.csv").read_bytes() == (runs["s2"] / "samples.csv").read_bytes()
    assert "continuing at step 9" in (runs["killed"] / "train.log").read_text()  # resumed inside epoch 2
    killed, straight = (sorted((runs[name] / "checkpoints").glob("step-*")) for name in ("killed", "s2"))
    assert killed[-1].name == straight[-1].name and _weights(killed[-1]) == _weights(straight[-1])
    assert _weights(straight[0]) != _weights(straight[-1])  # negative control: an earlier checkpoint differs
    assert [row[0] for row in _rows(runs["s2"], "metrics.csv", "storage_retries")] == ["0", "0"]
    (key,) = (tmp_path / "cache").iterdir()  # s1's shards, whole, as the copy holds them
    assert {p.name for p in key.glob("*.tar")} == {"train-00000.tar", "train-00001.tar", "val-00000.tar",
                                                   "val-00001.tar"}
    assert (key / "train-00001.tar").read_bytes() == (copy / "train-00001.tar").read_bytes()
    split = json.loads((runs["s2"] / "split.json").read_text())
    assert split["root"] == url and split["fingerprint"] == json.loads((runs["w2"] / "split.json").read_text())[
        "fingerprint"]
    assert split["source"] == "prepared" and split["prepared"]["format"] == "jpeg" and split["counts"]["test"] == 6
    evaluations = [json.loads(next((runs[r] / "evaluate").iterdir()).joinpath("evaluation.json").read_text())
                   for r in ("w2", "s2")]
    assert evaluations[0]["split"] == "test" and evaluations[0]["samples"] == 5  # the bad member left out (mark)
    assert [u["path"] for u in evaluations[0]["unreadable"]] == [bad_test]  # ... and named
    assert "1 of 6 test files could not be read and were left out" in test.stdout
    assert {k: evaluations[1][k] for k in ("split", "samples", "loss")} == \
        {k: evaluations[0][k] for k in ("split", "samples", "loss")}
    # predict on the copy's own samples: every split in turn, each row named by its shard and member
    (out,) = (runs["w2"] / "predict").iterdir()
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
    assert missing.returncode != 0 and "s3://no-such-bucket-here/copy/manifest.json does not exist" in missing.stderr
    assert not (tmp_path / "missing" / "checkpoints").exists()
    assert folder.returncode == 2 and "`data.path`" in folder.stderr and "data=prepared" in folder.stderr
    _check_no_secret(runs["s1"], cached.stdout)


def secrets(url: str) -> str:
    """storage_options that reach the endpoint at `url`, with a key and secret to look for."""
    return f"+data.storage_options={{key: AKIAEXAMPLE, secret: s3cr3tvalue, endpoint_url: {url}}}"

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
