"""The epoch loop through the real `train` CLI: Keras's hooks fire as `fit` fires them, and the
user's callbacks (EarlyStopping, TensorBoard) behave as under `fit`, across a resume too. The run and its
resumes share a process kept for the module (tests/docs_runner.py's OneProcess): TensorFlow loads once."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import recording
from docs_runner import OneProcess

TESTS = Path(__file__).resolve().parents[1]
EXECUTION = 4  # steps a call: 6 training steps make calls of 4 and 2
CONFIG = ["data.num_images=60", "data.source_size=64", "data.num_classes=3", "data.image_size=[16,16]",
          "data.batch_size=8", "model.widths=[8]", "trainer.epochs=3", f"trainer.steps_per_execution={EXECUTION}",
          "queue.workers=1"]
# never an improvement after the first epoch: `wait` counts 1, 2, ... and patience 3 stops after epoch 4
EARLY_STOPPING = "{_target_: keras.callbacks.EarlyStopping, monitor: val_loss, min_delta: 100, patience: 3}"


@pytest.fixture(scope="module")
def app():
    """`python -m app <args>` in `cwd`, the module's commands in one process."""
    with OneProcess(env={**os.environ, "PYTHONPATH": str(TESTS)}) as one_process:  # recording's callbacks
        yield one_process


@pytest.fixture(scope="module")
def run(tmp_path_factory, app) -> Path:
    root = tmp_path_factory.mktemp("epochs")
    callbacks = (f"trainer.callbacks=[{{_target_: recording.HookRecorder, path: {root / 'hooks.jsonl'}}}, "
                 f"{{_target_: keras.callbacks.TensorBoard, log_dir: {root / 'tensorboard'}}}, {EARLY_STOPPING}]")
    result = app("train", *CONFIG, callbacks, "hydra.run.dir=run", cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "run"


def fit_hooks(run: Path, tmp_path: Path) -> list[list]:
    """The hooks `fit` fires over the same number of steps, validation batches and epochs. For a
    short last call, `fit` reports begin + steps_per_execution - 1 as its last step, past the
    epoch's end; the trainer reports the step that was last: that is the one difference."""
    split = json.loads((run / "split.json").read_text())
    steps, val = len(split["train"]) // 8, len(split["val"])
    net = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.GlobalAveragePooling2D(),
                            keras.layers.Dense(3, activation="softmax")])
    net.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                steps_per_execution=EXECUTION)
    x, y = np.zeros((steps * 8, 16, 16, 3), np.float32), np.zeros(steps * 8, np.int64)
    path = tmp_path / "fit.jsonl"
    net.fit(x, y, batch_size=8, epochs=3, validation_data=(np.zeros((val, 16, 16, 3)), np.zeros(val, np.int64)),
            callbacks=[recording.HookRecorder(str(path)), keras.callbacks.EarlyStopping(
                monitor="val_loss", min_delta=100, patience=3)], verbose=0, shuffle=False)
    assert steps % EXECUTION and math.ceil(val / 8) >= 2  # a short last call, several validation batches
    last = {"train_batch_end": steps - 1, "test_batch_end": math.ceil(val / 8) - 1}
    return [[hook, min(index, last[hook]) if hook in last else index, keys]
            for hook, index, keys in recording.read(path)]


@pytest.mark.slow
def test_every_hook_fires_as_under_fit(run, tmp_path):
    ours, theirs = recording.read(run.parent / "hooks.jsonl"), fit_hooks(run, tmp_path)
    assert [h[:2] for h in ours] == [h[:2] for h in theirs]
    assert any(h[0] == "test_batch_end" for h in ours)  # negative control: the sequence is not empty of tests
    # the logs `fit` gives, and more: images/s, data wait, peak memory
    for hook in ("epoch_end", "test_end", "train_end"):
        assert all(set(t[2]) <= set(o[2]) for o, t in zip(ours, theirs, strict=True) if o[0] == hook)
    # metrics are read every trainer.log_every_steps (10): of the two calls an epoch, only the last
    ends = [h for h in ours if h[0] == "train_batch_end"]
    assert [bool(h[2]) for h in ends] == [False, True] * 3 and {"loss", "accuracy"} <= set(ends[1][2])


@pytest.mark.slow
def test_tensorboard_writes_epoch_scalars(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for split in ("train", "validation"):
        events = EventAccumulator(str(run.parent / "tensorboard" / split))
        events.Reload()
        tags = events.Tags()["tensors"]  # Keras writes its scalars as tensor summaries
        assert {"epoch_loss", "epoch_accuracy"} <= set(tags), events.Tags()
        assert [e.step for e in events.Tensors("epoch_loss")] == [0, 1, 2]


@pytest.mark.slow
def test_metrics_csv_has_the_loaders_telemetry_and_a_diagnosis(run):
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    for row in rows:
        stages = [float(row[f"{s}_ms"]) for s in ("read", "decode", "augment", "copy")]
        assert all(t > 0 for t in stages) and stages[1] + stages[2] > stages[0]  # decode and augment are the work
        assert 0 <= float(row["ring_fill"]) <= 1 and row["restarted_workers"] == row["skipped_samples"] == "0"
        assert 0 < float(row["peak_workers_mb"]) < float(row["peak_trainer_mb"]) <= float(row["peak_memory_mb"]) + 1
        assert row["diagnosis"].split(":")[0] in ("balanced", "input-bound", "model-bound", "copy-bound")
    log = (run / "train.log").read_text()
    assert "a sample read " in log and "ms in a worker, ring " in log and "workers restarted" in log


@pytest.mark.slow
def test_metrics_csv_has_each_classs_recall(run):
    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    classes = json.loads((run / "split.json").read_text())["class_names"]
    assert [f"val_recall_{name}" for name in classes] == [c for c in header if c.startswith("val_recall_")]
    assert not any("top" in c for c in header)  # top-5 of 3 classes is left out


@pytest.mark.slow
def test_the_runs_own_dashboard(run):
    """logger=tensorboard (the default): step and epoch scalars, validation's apart, the first
    batch's images, the hyper-parameters for TensorBoard's HParams view; augmented.png."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def tags(path: Path) -> set[str]:
        events = EventAccumulator(str(path))
        events.Reload()
        return set(events.Tags()["tensors"])

    train, validation = tags(run / "tensorboard" / "train"), tags(run / "tensorboard" / "validation")
    assert {"step/loss", "step/learning_rate", "step/images_per_s", "step/data_wait_fraction",
            "step/peak_memory_mb", "epoch/loss", "epoch/accuracy", "augmented"} <= train
    # the loader's telemetry, live and at each epoch's end (numbers only: Keras's own TensorBoard
    # callback, in this run too, writes every epoch figure it is given)
    telemetry = {"ring_fill", "read_ms", "decode_ms", "augment_ms", "copy_ms", "peak_trainer_mb", "peak_workers_mb"}
    assert {f"step/{t}" for t in telemetry} <= train and {f"epoch/{t}" for t in telemetry} <= train
    assert "epoch/diagnosis" not in train and "epoch/restarted_workers" in train
    assert {"epoch/loss", "epoch/accuracy"} <= validation and not any(t.startswith("step/") for t in validation)
    assert "_hparams_/session_start_info" in tags(run / "tensorboard")
    assert (run / "augmented.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def rows(run: Path) -> list[str]:
    return [line.split(",")[0] for line in (run / "metrics.csv").read_text().splitlines()[1:]]


@pytest.mark.slow
def test_early_stopping_goes_on_counting_after_a_resume(run, app):
    """EarlyStopping's `wait` (2 after three epochs) is in the checkpoint: resumed to 6 epochs,
    the run stops after epoch 4, as an uninterrupted one would."""
    saved = json.loads(sorted((run / "checkpoints").glob("step-*"))[-1].joinpath("state.json").read_text())
    assert {"wait": 2}.items() <= saved["callbacks"][2].items()
    bare = run.parent / "bare"  # negative control: the same run, its callbacks' state removed
    shutil.copytree(run, bare)
    for state in bare.glob("checkpoints/step-*/state.json"):
        state.write_text(json.dumps({**json.loads(state.read_text()), "callbacks": None}))
    for resumed in (run, bare):
        result = app("train", f"resume={resumed}", "trainer.epochs=6", cwd=run.parent)
        assert result.returncode == 0, result.stderr[-3000:]
    assert rows(run) == ["1", "2", "3", "4"]
    assert "a callback stopped training after epoch 4" in (run / "train.log").read_text()
    assert rows(bare) == ["1", "2", "3", "4", "5", "6"]


def validation_rows(labels: np.ndarray, limit: int | None, seed: int = 0, placement=None) -> list[int]:
    """The validation samples the epoch loop hands to the steps (each sample a batch of its own
    here, the loader's part left out), batch 8."""
    from app.data.source import FileSplit
    from app.tasks import task_of
    from app.training import epochs
    from app.training.devices import Placement

    val = FileSplit([f"{i:03d}.png" for i in range(len(labels))], labels)

    def one_a_batch(split, order, epoch):
        return iter([(np.array([i]), labels[[i]]) for i in order])

    config = SimpleNamespace(data=SimpleNamespace(batch_size=8), seed=seed,
                             trainer=SimpleNamespace(validation_steps=limit))
    host = SimpleNamespace(context=SimpleNamespace(config=config), head=SimpleNamespace(task=task_of("multiclass")),
                           source=SimpleNamespace(val=val), loader=SimpleNamespace(batches=one_a_batch),
                           placement=placement or Placement(strategy_name="default", devices=["/device:CPU:0"]))
    feed = epochs.Epochs._validation_feed(host)
    return [int(i) for x, _ in feed.batches for i in x]


def test_validation_steps_score_every_class_in_its_share():
    """trainer.validation_steps (debug=fast) on a folder's split, listed class by class: its
    batches hold each class as the split does, picked by the seed, every sample once."""
    from app.training.devices import Placement

    labels = np.repeat([0, 1, 2], [41, 30, 10])
    picked = validation_rows(labels, 2)
    assert len(picked) == len(set(picked)) == 16 and np.bincount(labels[picked]).tolist() == [8, 6, 2]
    assert validation_rows(labels, 2) == picked != validation_rows(labels, 2, seed=1)
    shares = [validation_rows(labels, 2, placement=Placement(strategy_name="data_parallel", devices=["/device:CPU:0"],
                                                               processes=2, process=p)) for p in (0, 1)]
    assert sorted(shares[0] + shares[1]) == picked
    # negative control: no limit, every sample once, in order
    assert validation_rows(labels, None) == list(range(len(labels)))
