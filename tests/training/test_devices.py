"""trainer.strategy=mirrored over 2 logical CPU devices, through the real `train`, `evaluate` and
`predict` CLI: each replica trains on half of every batch, every sample once an epoch, the
weights one device trains, an exact resume, checkpoints that load on one device; the traced
step receives uint8. In-process: trainer.precision under a strategy, the batch check."""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import keras
import numpy as np
import probe
import pytest
import recording
from docs_runner import spawn_one_process_for

from app.errors import ConfigError
from app.runs.checkpoint import newest_first
from app.training.devices import Placement, _check_batch, allocator_host_mib

TESTS = Path(__file__).resolve().parents[1]
TRAIN, VAL = range(16), range(100, 105)  # 4 steps of 4; validation's last batch has 1 image
EPOCHS = 2
CONFIG = ["data=folder", "data.image_size=[8,8]", "data.batch_size=4", "augment=none", "model=custom",
          "model._target_=probe.counting_model", "trainer.deterministic=true",
          "queue.workers=0", "print_config=false", "optimizer.learning_rate=0.05"]
MIRRORED = ["trainer.strategy=mirrored", "trainer.cpu_devices=2"]


ENV = {**os.environ, "PYTHONPATH": str(TESTS)}  # probe.counting_model, recording.StepInputs


def app(*args, cwd):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, env=ENV)


def last_model(run: Path) -> keras.Model:
    return keras.saving.load_model(newest_first(run)[0] / "model.keras", compile=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """two: 2 replicas; batch_norm: a ResNet on 2 replicas, evaluated; two evaluated and predicted
    (on one device); one: one device."""
    root = tmp_path_factory.mktemp("devices")
    probe.index_images(root / "images", {"train": TRAIN, "val": VAL})
    common = [*CONFIG, f"data.path={root / 'images'}", f"trainer.epochs={EPOCHS}"]
    inputs = f"trainer.callbacks=[{{_target_: recording.StepInputs, path: {root / 'dtypes.txt'}}}]"
    # one process, its CPU split in two: TensorFlow loads once; the one-device run last, on the first
    for done in spawn_one_process_for(["train", *common, *MIRRORED, inputs, "hydra.run.dir=two"],
                                      ["evaluate", f"resume={root / 'two'}"],
                                      ["predict", f"resume={root / 'two'}", f"input={root / 'images' / 'val'}"],
                                      ["train", *common, "hydra.run.dir=one"], cwd=root, env=ENV):
        assert done.returncode == 0, f"{done.args}: {done.stderr[-3000:]}"
    # a model of other shapes in a process of its own: MirroredStrategy's collectives in one process
    # keep the shapes of the first model they reduced
    resnet = [c for c in common if not c.startswith("model")] + ["model=resnet", "model.widths=[8]"]
    for done in spawn_one_process_for(["train", *resnet, "trainer.epochs=1", *MIRRORED, "hydra.run.dir=batch_norm"],
                                      ["evaluate", f"resume={root / 'batch_norm'}"], cwd=root, env=ENV):
        assert done.returncode == 0, f"{done.args}: {done.stderr[-3000:]}"
    return root


@pytest.mark.slow
def test_each_replica_trains_half_of_every_batch_and_each_sample_once(runs):
    summary = json.loads((runs / "two" / "summary.json").read_text())
    assert (summary["strategy"], summary["replicas"], summary["status"]) == ("mirrored", 2, "completed")
    assert summary["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    trained, rows = probe.counts(last_model(runs / "two"))
    assert rows == 2  # half of data.batch_size=4 on each replica
    assert list(np.flatnonzero(trained)) == list(TRAIN) and set(trained[list(TRAIN)]) == {EPOCHS}
    # negative control: one device sees whole batches; the counter tells them apart
    one = json.loads((runs / "one" / "summary.json").read_text())
    assert (one["strategy"], one["replicas"]) == ("default", 1)
    trained_one, rows_one = probe.counts(last_model(runs / "one"))
    assert rows_one == 4 and np.array_equal(trained_one, trained)


@pytest.mark.slow
def test_two_replicas_train_the_weights_of_one_device(runs):
    one, two = last_model(runs / "one"), last_model(runs / "two")
    kernel_one, kernel_two = (net.get_layer("counting").get_layer("probabilities").kernel for net in (one, two))
    assert np.allclose(kernel_one, kernel_two, atol=1e-5)
    # negative control: the tolerance tells epochs apart (the weights after the first)
    first = keras.saving.load_model(newest_first(runs / "two")[-1] / "model.keras", compile=False)
    assert not np.allclose(first.get_layer("counting").get_layer("probabilities").kernel, kernel_two, atol=1e-3)


@pytest.fixture(scope="module")
def resumed(runs) -> Path:
    """2 replicas, killed as epoch 2's last step begins (after a checkpoint inside it: Keras's
    metrics restored), resumed."""
    common = [*CONFIG, f"data.path={runs / 'images'}", f"trainer.epochs={EPOCHS}"]
    kill = (f"trainer.callbacks=[{{_target_: recording.KillOnce, path: {runs / 'killed.txt'}, epoch: 1, "
            f"batch: {len(TRAIN) // 4 - 1}}}]")
    first = app("train", *common, *MIRRORED, "trainer.checkpoint_every_steps=2", kill, "hydra.run.dir=resumed",
                cwd=runs)
    assert first.returncode == -9 and (runs / "killed.txt").exists(), first.stderr[-3000:]
    done = app("train", f"resume={runs / 'resumed'}", cwd=runs)
    assert done.returncode == 0, done.stderr[-3000:]
    return runs


@pytest.mark.slow
@pytest.mark.exhaustive
def test_a_resumed_mirrored_run_equals_an_uninterrupted_one(resumed):
    """Covered in `make test` by: a JAX run over 2 devices resumed (below) and exact resumes on one
    device (tests/cli/test_resume_cli.py)."""
    runs = resumed
    resumed, straight = last_model(runs / "resumed"), last_model(runs / "two")
    for a, b in zip(resumed.weights, straight.weights, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b)), a.path
    read = [[tuple(row[k] for k in FIGURES) for row in csv.DictReader((runs / run / "metrics.csv").open())]
            for run in ("resumed", "two")]
    assert read[0] == read[1] and len(read[0]) == EPOCHS
    assert len(json.loads((runs / "resumed" / "summary.json").read_text())["resumed"]) == 1


FIGURES = [f"{split}{name}" for split in ("", "val_") for name in ("loss", "accuracy", "recall_class_0",
                                                                    "recall_class_1")]


@pytest.mark.slow
def test_two_replicas_log_the_figures_of_one_device(runs):
    """Each replica's own ratio, averaged, is not the pooled one: a class's recall over unequal
    shares, validation's short last batch (1 image, on one replica only)."""
    rows = [list(csv.DictReader((runs / run / "metrics.csv").open())) for run in ("one", "two")]
    for one, two in zip(*rows, strict=True):
        assert [float(one[k]) for k in FIGURES] == pytest.approx([float(two[k]) for k in FIGURES], abs=1e-6)


@pytest.mark.slow
def test_the_traced_step_receives_uint8_under_the_strategy(runs):
    assert set((runs / "dtypes.txt").read_text().split()) == {"uint8"}


@pytest.mark.slow
def test_evaluate_and_predict_count_each_row_once_on_one_device(runs):
    run = runs / "two"
    (out,) = (run / "evaluate").iterdir()
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["samples"] == np.array(evaluation["confusion"]).sum() == len(VAL)
    # the last validation pass of training saw each file once, as evaluate does
    first, last = list(csv.DictReader((run / "metrics.csv").open()))
    evaluated = [evaluation["loss"], evaluation["accuracy"],
                 *(evaluation["per_class"][name]["recall"] for name in ("class_0", "class_1"))]
    assert evaluated == pytest.approx([float(last[k]) for k in FIGURES[4:]], abs=1e-6)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["val_accuracy"] == pytest.approx(evaluation["accuracy"], abs=1e-6)
    # negative control: the first epoch's figures are told apart at this tolerance
    assert evaluated != pytest.approx([float(first[k]) for k in FIGURES[4:]], abs=1e-6)
    (out,) = (run / "predict").iterdir()
    rows = list(csv.reader((out / "predictions.csv").open()))[1:]
    assert sorted(Path(row[0]).name for row in rows) == [f"{i:03d}.png" for i in VAL]


@pytest.mark.slow
def test_batch_norm_statistics_are_one_models_on_every_replica(runs):
    """Each replica updates BatchNormalization's moving statistics from its own share; validation
    (on every replica) and the checkpoint (the first replica's) must see the same ones."""
    (out,) = (runs / "batch_norm" / "evaluate").iterdir()
    evaluation = json.loads((out / "evaluation.json").read_text())
    (row,) = csv.DictReader((runs / "batch_norm" / "metrics.csv").open())
    assert [evaluation["loss"], evaluation["accuracy"]] == pytest.approx([float(row["val_loss"]),
                                                                          float(row["val_accuracy"])], abs=1e-6)
    # negative control: the statistics are the data's, not the initial ones validation would share
    net = last_model(runs / "batch_norm")
    means = [np.asarray(v) for v in net.weights if v.path.endswith("moving_mean")]
    assert means and all(np.abs(m).max() > 1e-3 for m in means)


def test_a_batch_the_replicas_cannot_share_is_refused_with_the_fix():
    placement = Placement(strategy_name="mirrored", devices=["/device:GPU:0", "/device:GPU:1", "/device:GPU:2"],
                          strategy=object())
    with pytest.raises(ConfigError, match=r"data.batch_size.*3 replicas.*data.batch_size=12 or 9"):
        _check_batch(10, placement)
    _check_batch(12, placement)  # negative control: a multiple passes


class PooledGpu:
    """A GPU as jax.local_devices() gives one, its memory_stats() as an H200's (measured there: 104.9 GiB pool)."""

    platform = "gpu"

    @staticmethod
    def memory_stats():
        return {"bytes_limit": 112_583_507_968}


def test_the_gpu_allocators_host_share_is_a_32nd_of_its_preallocated_pool(monkeypatch):
    import jax  # here only: the rest of this file runs JAX in the CLI's own processes

    jax_trainer, tf_trainer = SimpleNamespace(backend="jax"), SimpleNamespace(backend="tensorflow")
    assert allocator_host_mib(jax_trainer) == 0.0  # this machine: JAX's CPU device, no pool
    monkeypatch.setattr(jax, "local_devices", lambda: [PooledGpu(), PooledGpu()])
    assert allocator_host_mib(jax_trainer) == pytest.approx(2 * 3355.25)  # measured there: +3,355 MiB a pool
    assert allocator_host_mib(tf_trainer) == 0.0  # negative controls: TensorFlow (not measured), pools grown by use
    for name, value in (("XLA_PYTHON_CLIENT_PREALLOCATE", "false"), ("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            assert allocator_host_mib(jax_trainer) == 0.0


def test_a_validation_split_smaller_than_the_replicas_is_refused():
    from app.training.inputs import check_validation_rows

    placement = Placement(strategy_name="mirrored", devices=["/device:CPU:0", "/device:CPU:1"], strategy=object())
    with pytest.raises(ConfigError, match=r"trainer.strategy.*1 sample.*2 replicas.*trainer.cpu_devices"):
        check_validation_rows(1, placement)
    check_validation_rows(2, placement)  # negative controls: one each, or one device
    check_validation_rows(1, Placement(strategy_name="default", devices=["/device:CPU:0"]))


def composed(*overrides: str):
    from hydra import compose, initialize_config_dir

    from app.config import conf_dir, load
    from app.schema import register

    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return load(compose("config", overrides=list(overrides)))


@pytest.mark.parametrize("precision", ["float32", pytest.param("mixed_float16", marks=pytest.mark.slow),
                                       pytest.param("mixed_bfloat16", marks=pytest.mark.slow)])
def test_each_precision_trains_under_a_strategy_with_float32_ends(precision, tmp_path):
    """One replica of MirroredStrategy in this process (the CPU is not split here): the model,
    optimizer and step built in its scope, the batches distributed, as the trainer does."""
    import tensorflow as tf

    from app import model as models
    from app.runs.checkpoint import EpochFigures
    from app.training import devices, recipe
    from app.training.steps import EpochPlan, Feed, build_step_variables, train_epoch

    config = composed("model.widths=[8]", "data.image_size=[16,16]", f"trainer.precision={precision}",
                      "trainer.jit_compile=false", "trainer.top_k=null", "trainer.per_class_recall=false")
    devices.set_precision(config.trainer)
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 256, (4, 16, 16, 3), np.uint8), np.array([0, 1, 2, 0])) for _ in range(2)]
    try:
        with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
            net = models.build(config.model, [16, 16], 3)
            recipe.compile_new(net, config, 2, recipe.Head(["a", "b", "c"]))
            inputs = recording.StepInputs(str(tmp_path / "dtypes.txt"))
            inputs.set_model(net)
            inputs.on_train_begin()
            build_step_variables(net)
            figures = train_epoch(net, Feed(batches, 2), keras.callbacks.CallbackList([], model=net),
                                  EpochFigures(), EpochPlan(steps=2, batch_size=4))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert np.isfinite(figures.logs["loss"]) and figures.steps == 2
    compute = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}[precision]
    backbone = net.get_layer("small_resnet")
    convolution = next(layer for layer in backbone.layers if isinstance(layer, keras.layers.Conv2D))
    assert convolution.compute_dtype == compute and convolution.kernel.dtype == "float32"
    assert net.get_layer("normalise").compute_dtype == "float32" and net.output.dtype == "float32"
    assert isinstance(net.optimizer, keras.optimizers.LossScaleOptimizer) == (precision == "mixed_float16")
    assert (tmp_path / "dtypes.txt").read_text().split() == ["uint8"]  # the cast is inside the step
    # negative control: the recorder reports what it is given
    net.train_on_batch(batches[0][0].astype(np.float32), batches[0][1])
    assert (tmp_path / "dtypes.txt").read_text().split()[-1] == "float32"


# --- JAX: trainer.backend=jax, data_parallel over 2 local devices and over 2 processes ----------

JAX = ["trainer.backend=jax"]
DATA_PARALLEL = ["trainer.strategy=data_parallel"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jax_runs(tmp_path_factory) -> Path:
    """processes: 2 processes on loopback, a device each, then evaluated and predicted; local: 2
    devices of one process, 1 epoch, then resumed to 2."""
    root = tmp_path_factory.mktemp("jax")
    probe.index_images(root / "images", {"train": TRAIN, "val": VAL})
    common = [*CONFIG, f"data.path={root / 'images'}", f"trainer.epochs={EPOCHS}", *JAX]
    hosts = [*common, *DATA_PARALLEL, f"trainer.coordinator=127.0.0.1:{free_port()}", "trainer.num_processes=2",
             f"trainer.callbacks=[{{_target_: recording.StepInputs, path: {root / 'dtypes.txt'}}}]",
             f"hydra.run.dir={root / 'processes'}"]
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    started = [subprocess.Popen([sys.executable, "-m", "app", "train", *hosts, f"trainer.process_id={i}"], cwd=root,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    for process in started:
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
    local = [*common, *DATA_PARALLEL, "trainer.cpu_devices=2"]
    run = root / "processes"
    for done in spawn_one_process_for(["train", *local, "trainer.epochs=1", "hydra.run.dir=local"],
                                      ["train", f"resume={root / 'local'}", f"trainer.epochs={EPOCHS}"],
                                      ["evaluate", f"resume={run}"],
                                      ["predict", f"resume={run}", f"input={root / 'images' / 'val'}"],
                                      cwd=root, env=ENV):  # one process: JAX loads once
        assert done.returncode == 0, f"{done.args}: {done.stderr[-3000:]}"
    return root


def kernel(net: keras.Model) -> np.ndarray:
    return np.asarray(net.get_layer("counting").get_layer("probabilities").kernel)


@pytest.mark.slow
def test_two_jax_processes_train_each_sample_once_into_one_run_directory(jax_runs):
    run = jax_runs / "processes"
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["strategy"], summary["replicas"], summary["processes"]) == ("data_parallel", 2, 2)
    assert summary["versions"]["jax"] != "not installed" and summary["status"] == "completed"
    other = json.loads((run / "summary.1.json").read_text())  # process 1's own record, and log
    assert other["status"] == "completed" and other["epochs_completed"] == EPOCHS
    assert "this is process 1" in (run / "train.1.log").read_text()
    assert "this is process 0" in (run / "train.log").read_text()
    assert "this is process 1" not in (run / "train.log").read_text()
    assert sorted(p.name for p in jax_runs.iterdir()) == ["dtypes.txt", "images", "local", "processes"]
    trained, _ = probe.counts(last_model(run))
    assert list(np.flatnonzero(trained)) == list(TRAIN) and set(trained[list(TRAIN)]) == {EPOCHS}
    # the same steps as 2 devices of one process (resumed there after epoch 1)
    assert np.allclose(kernel(last_model(run)), kernel(last_model(jax_runs / "local")), atol=1e-5)
    figures = ("loss", "accuracy", "val_loss", "val_accuracy")
    rows = [[[float(r[k]) for k in figures] for r in csv.DictReader((jax_runs / name / "metrics.csv").open())]
            for name in ("processes", "local")]
    assert np.allclose(rows[0], rows[1], atol=1e-5)  # validation's short last batch counted once


@pytest.mark.slow
def test_jax_local_devices_train_each_sample_once_across_a_resume(jax_runs):
    run = jax_runs / "local"
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["strategy"], summary["replicas"], summary["epochs_completed"]) == ("data_parallel", 2, EPOCHS)
    assert len(summary["resumed"]) == 1
    trained, _ = probe.counts(last_model(run))
    assert set(trained[list(TRAIN)]) == {EPOCHS} and trained.sum() == EPOCHS * len(TRAIN)
    # negative control: the first epoch's weights are told apart at this tolerance
    assert not np.allclose(kernel(keras.saving.load_model(newest_first(run)[-1] / "model.keras", compile=False)),
                           kernel(last_model(run)), atol=1e-3)


@pytest.mark.slow
def test_the_traced_jax_step_receives_uint8(jax_runs):
    assert set((jax_runs / "dtypes.txt").read_text().split()) == {"uint8"}


@pytest.mark.slow
def test_evaluate_and_predict_a_jax_run(jax_runs):
    run = jax_runs / "processes"
    (out,) = (run / "evaluate").iterdir()
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["samples"] == np.array(evaluation["confusion"]).sum() == len(VAL)
    last = list(csv.DictReader((run / "metrics.csv").open()))[-1]
    assert evaluation["accuracy"] == pytest.approx(float(last["val_accuracy"]), abs=1e-6)
    assert "Keras on jax" in next(out.glob("*.log")).read_text()
    (out,) = (run / "predict").iterdir()
    assert len(list(csv.reader((out / "predictions.csv").open()))) == 1 + len(VAL)
