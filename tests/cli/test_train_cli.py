"""`python -m app train` end to end: the real CLI in a subprocess, real files, real TensorFlow."""

from __future__ import annotations

import csv
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
from docs_runner import spawn_one_process_for
from loaders import wait_until
from PIL import Image

from app.capacity.memory import is_fork_server

TINY = ["data.num_images=24", "data.source_size=96", "data.num_classes=3", "data.image_size=[32,32]",
        "data.batch_size=4", "model.widths=[8,16]", "trainer.epochs=2"]


def app(*args: str, cwd: Path, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env={**os.environ, **(env or {})})


def only_run_dir(root: Path) -> Path:
    (summary,) = root.rglob("summary.json")
    return summary.parent


def check_run_dir(run: Path, epochs: int) -> dict:
    for name in ("train.log", "metrics.csv", "summary.json", "split.json", "model.keras", ".hydra/config.yaml"):
        assert (run / name).exists(), name
    assert list((run / "checkpoints").glob("step-*/model.keras"))
    summary = json.loads((run / "summary.json").read_text())
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(r["epoch"]) for r in rows] == list(range(1, epochs + 1))
    last = rows[-1]
    assert summary["status"] == "completed" and summary["epochs_completed"] == epochs
    assert summary["loss"] == pytest.approx(float(last["loss"]))
    assert summary["val_accuracy"] == pytest.approx(float(last["val_accuracy"]))
    assert summary["images_per_s"] == pytest.approx(float(last["images_per_s"]))
    assert summary["peak_memory_mb"] >= max(float(r["peak_memory_mb"]) for r in rows) - 1
    assert 0 <= float(last["data_wait_fraction"]) <= 1 and float(last["images_per_s"]) > 0
    assert summary["versions"]["tensorflow"].startswith("2.") and summary["hardware"]["cpu_count"] >= 1
    split = json.loads((run / "split.json").read_text())
    assert split["fingerprint"] and split["train"] and split["val"]
    return summary


@pytest.mark.slow
def test_train_from_another_directory(tmp_path):
    result = app("train", *TINY, "queue.workers=2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run = only_run_dir(tmp_path / "outputs")
    assert run.parent.parent == tmp_path / "outputs"  # outputs/<date>/<time>/
    assert list((tmp_path / "datasets" / "synthetic").glob("*/*/*.jpg"))  # relative to where it ran
    summary = check_run_dir(run, epochs=2)
    assert summary["queue_bytes"] == 2 * 4 * 32 * 32 * 3
    train_samples = len(json.loads((run / "split.json").read_text())["train"])
    assert summary["steps"] == 2 * (train_samples // 4)  # full batches only
    assert "epoch 2/2" in (run / "train.log").read_text()
    assert "data.num_images=24" in summary["overrides"]
    # the terminal gets the log and the result, TensorFlow's start-up lines go to the log
    summary_line = f"run dir: {run}\n2 epochs done, val_accuracy {round(summary['val_accuracy'], 4)}\n"
    assert summary_line in result.stdout, result.stdout[-2000:]
    assert "oneDNN" not in result.stderr and "absl::InitializeLog" not in result.stderr
    assert "oneDNN" in (run / "train.log").read_text()  # negative control: they are printed, elsewhere
    assert "XLA (trainer.jit_compile=auto): off" in (run / "train.log").read_text()  # Keras's auto, on a CPU
    # the memory plan at start, the measured peak beside it at the end
    assert summary["memory_plan"]["host_peak_mib"] > 0 and summary["peak_memory_mb"] > 0
    assert "memory plan: host peak" in (run / "train.log").read_text()
    assert "MiB measured" in (run / "train.log").read_text()


OVERFIT = [*TINY, "debug=overfit", "trainer.epochs=12", "optimizer.learning_rate=0.01", "model.dropout=0",
           "trainer.record_samples=true", "trainer.profile_steps=[3,4]", "tags=[smoke,one batch]", "print_config=false",
           "queue.workers=1", "hydra.run.dir=overfit"]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> SimpleNamespace:
    """The commands of the tests below that need no process of their own, one after another in one
    process (tests/docs_runner.py: TensorFlow loads once)."""
    root = tmp_path_factory.mktemp("one_process")
    names = ["top", "cfg", "hydra_help", "unknown", "cifar", "jit", "sweep", "overfit"]
    done = spawn_one_process_for(
        ["--help"], ["train", "--cfg", "job", "queue.max_size=3"], ["train", "--help"], ["trian"],
        ["train", "data=cifar", f"data.path={root / 'nothing'}", "hydra.run.dir=cifar"],
        ["train", *TINY, "trainer.epochs=1", "trainer.jit_compile=true", "queue.workers=0", "hydra.run.dir=run"],
        ["train", "-m", *TINY, "trainer.epochs=1", "queue.max_size=0,2", "hydra.sweep.dir=sweep"],
        ["train", *OVERFIT], cwd=root, env={**os.environ, "HOME": str(root)})
    return SimpleNamespace(root=root, **dict(zip(names, done, strict=True)))


@pytest.mark.slow
def test_help_cfg_unknown_command_and_jit_compile_reaching_keras(one_process):
    top, cfg, hydra_help, unknown, jit = (one_process.top, one_process.cfg, one_process.hydra_help,
                                          one_process.unknown, one_process.jit)
    tmp_path = one_process.root
    assert top.returncode == 0 and "train" in top.stdout
    assert cfg.returncode == 0 and "max_size: 3" in cfg.stdout and "data:" in cfg.stdout
    assert hydra_help.returncode == 0 and "queue: default" in hydra_help.stdout
    assert unknown.returncode != 0 and "unknown command 'trian'" in unknown.stderr and "train" in unknown.stderr
    assert not (tmp_path / "outputs").exists()
    assert jit.returncode == 0, jit.stderr[-3000:]
    assert "XLA (trainer.jit_compile=True): on" in (tmp_path / "run" / "train.log").read_text()
    check_run_dir(tmp_path / "run", epochs=1)


@pytest.mark.slow
def test_a_failing_job_is_recorded_and_the_sweep_goes_on(one_process):
    result, tmp_path = one_process.sweep, one_process.root
    assert result.returncode != 0 and "queue.max_size" in result.stderr  # the sweep reports the failure
    failed = json.loads((tmp_path / "sweep" / "0" / "summary.json").read_text())
    assert failed["status"] == "failed" and "queue.max_size" in failed["message"]
    done = check_run_dir(tmp_path / "sweep" / "1", epochs=1)  # the next job ran all the same
    assert done["isolation"] == "clean"


def write_tiny_cifar(root: Path, per_batch: int = 6) -> None:
    """CIFAR-10 in its official python format: pickled dicts of 3072-byte rows (R, G, B planes)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = [int(x) for x in rng.integers(0, 10, per_batch)]
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        with open(folder / name, "wb") as f:
            pickle.dump({b"batch_label": name.encode(), b"labels": labels, b"data": data,
                         b"filenames": [b"x.png"] * per_batch}, f)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": names, b"num_cases_per_batch": per_batch, b"num_vis": 3072}, f)


@pytest.mark.slow
def test_cifar_missing_names_the_archive_and_the_download_key(one_process):
    """No CIFAR-10 where data.path says: the archive to put there, or data.download. (The CIFAR recipe
    itself trains in tests/cli/test_docs_commands.py, as README shows it.)"""
    missing, tmp_path = one_process.cifar, one_process.root
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert str(tmp_path / "nothing" / "cifar-10-python.tar.gz") in missing.stderr
    assert "data.download=true" in missing.stderr


@pytest.mark.slow
@pytest.mark.exhaustive
def test_folder_of_mixed_formats(tmp_path):
    """Covered in `make test` by: the folder source through the CLI (README's data=folder run,
    tests/cli/test_docs_commands.py) and each format and mode decoded (tests/data/test_images.py)."""
    rng = np.random.default_rng(1)
    images = tmp_path / "images"
    for c, cls in enumerate(["cats", "dogs"]):
        (images / cls).mkdir(parents=True)
        for i in range(6):
            pixels = rng.integers(0, 256, (40 + 8 * i, 48, 3), dtype=np.uint8)
            pixels[..., c] = 255
            image = Image.fromarray(pixels)
            kind = i % 6
            if kind == 0:
                image.save(images / cls / f"{i}.jpg", quality=90)
            elif kind == 1:
                image.convert("RGBA").save(images / cls / f"{i}.png")
            elif kind == 2:
                image.convert("L").save(images / cls / f"{i}.bmp")
            elif kind == 3:
                image.save(images / cls / f"{i}.webp")
            elif kind == 4:
                image.convert("P").save(images / cls / f"{i}.tiff")
            else:  # a 16-bit PNG is refused without data.dtype=uint16 (tests/data/test_images.py): 8-bit grey here
                Image.fromarray(pixels[..., 0]).save(images / cls / f"{i}.png")
    result = app("train", "data=folder", f"data.path={images}", "data.image_size=[32,32]",
                 "data.batch_size=4",
                 "model.widths=[8]", "trainer.epochs=1", "queue.workers=1", "queue.use_multiprocessing=false",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run = only_run_dir(tmp_path / "outputs")
    check_run_dir(run, epochs=1)
    split = json.loads((run / "split.json").read_text())
    assert split["class_names"] == ["cats", "dogs"] and len(split["train"]) + len(split["val"]) == 12


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", pytest.param("sigterm", marks=pytest.mark.exhaustive)])
def test_interrupt_stops_workers_and_frees_shared_memory(how, tmp_path):
    """Ctrl-C pressed until it stops, or (in `make test-all`) a scheduler's SIGTERM to the training process alone.
    Covered in `make test` by: Ctrl-C here, and SIGTERM to predict (tests/cli/test_evaluate_predict_cli.py), which
    reach the same stop handler (app/processes.py)."""
    args = [sys.executable, "-m", "app", "train", *TINY, "data.num_images=200", "trainer.epochs=200",
            "queue.workers=2", "trainer.record_samples=true", "hydra.run.dir=run"]
    # A shell's background job (CI may run us as one) starts with SIGINT ignored, and a child
    # inherits that; a terminal user's training process does not. Start it as a user would.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    log, samples = tmp_path / "run" / "train.log", tmp_path / "run" / "samples.csv"
    deadline = time.monotonic() + 240
    # inside the first epoch (40 steps), a few steps in: the header and four rows
    while time.monotonic() < deadline and len(samples.read_text().splitlines() if samples.exists() else []) < 5:
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        time.sleep(0.02)
    tree = {p.pid: " ".join(p.cmdline()) for p in psutil.Process(process.pid).children(recursive=True)}
    helpers = {pid for pid, cmdline in tree.items() if "resource_tracker" in cmdline or is_fork_server(pid)}
    workers = tree.keys() - helpers
    assert len(workers) == 2 and len(helpers) == 2  # the resource tracker, the fork server
    segments = [n for n in os.listdir("/dev/shm") if n.startswith(f"app-ring-{process.pid}-")]
    assert len(segments) == 1  # negative control for the check below
    sent = time.monotonic()
    if how == "ctrl-c":  # a user pressing Ctrl-C again and again until it stops
        while process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole group
            try:
                process.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
    else:
        process.terminate()  # a scheduler's stop: SIGTERM to the training process alone
    _, stderr = process.communicate(timeout=60)
    stopped_s = time.monotonic() - sent
    assert process.returncode == 130, stderr.decode()[-3000:]
    assert "Traceback" not in stderr.decode() and "leaked" not in stderr.decode()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in workers)
    assert wait_until(lambda: not any(psutil.pid_exists(pid) for pid in helpers))  # they end with it
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"app-ring-{process.pid}-")]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "interrupted"
    rows = len(samples.read_text().splitlines()) - 1  # a row a step taken, and the header
    # not the last epoch end's count (0 here): the step taken, whose row is written after it by a
    # callback that a Ctrl-C arriving between the two leaves unwritten
    said = re.search(r"interrupted after step (\d+);", log.read_text())
    assert said and int(said[1]) in (rows, rows + 1) and rows >= 4, (rows, log.read_text()[-2000:])
    assert stopped_s < 15, f"took {stopped_s:.1f} s to stop"  # a hang guard, not a timing


@pytest.mark.slow
def test_debug_overfit_learns_one_batch_and_profile_steps_trace_the_window(one_process):
    """debug=overfit: the same batch every epoch, trained and validated on, learnt;
    trainer.profile_steps on top: TensorBoard's profiler traced exactly those steps, each marked;
    tags in TensorBoard; print_config=false prints no tree."""
    result = one_process.overfit
    assert result.returncode == 0, result.stderr[-3000:]
    run = one_process.root / "overfit"
    split = json.loads((run / "split.json").read_text())
    steps = list(csv.DictReader((run / "samples.csv").open()))
    batches = {tuple(sorted(map(int, r["indices"].split()))) for r in steps}
    assert len(steps) == 12 and batches == {(0, 1, 2, 3)}  # one batch of data.batch_size=4, every epoch
    assert len(split["overfit"]) == 4 and len(set(split["overfit"])) == 4
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert float(rows[-1]["accuracy"]) == 1.0 and float(rows[-1]["loss"]) < float(rows[0]["loss"]) / 4
    assert "├──" not in result.stdout and "overfitting: training and validating on the same 4" in \
        (run / "train.log").read_text()
    assert profiled_steps(run / "tensorboard") == [3, 4]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tags"] == ["smoke", "one batch"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard" / "train"), size_guidance={"tensors": 0}).Reload()
    (tags,) = events.Tensors("tags")
    assert tags.tensor_proto.string_val == [b"smoke, one batch"]


def profiled_steps(logdir: Path) -> list[int]:
    """The step numbers the profiler's trace marks (its XSpace protobuf, as TensorBoard reads it)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    (trace,) = logdir.glob("plugins/profile/*/*.xplane.pb")
    space = xplane_pb2.XSpace.FromString(trace.read_bytes())
    found = []
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                if plane.event_metadata[event.metadata_id].name == "train":
                    found += [s.int64_value for s in event.stats if names[s.metadata_id] == "step_num"]
    return sorted(found)


def _trained(run: Path) -> list[np.ndarray]:
    import keras

    import app.objectives  # noqa: F401 - the checkpoint's metric classes

    last = sorted((run / "checkpoints").glob("step-*"))[-1]  # with its optimizer, unlike model.keras
    model = keras.saving.load_model(last / "model.keras")
    return [v.numpy() for v in [*model.weights, *model.optimizer.variables]]


@pytest.mark.slow
@pytest.mark.exhaustive
def test_auto_queue_trains_exactly_as_the_values_it_chose(tmp_path):
    """The probe behind queue.workers=auto and queue.max_size=auto updates no weight
    and draws no random number: a seeded run with `auto` ends with the very weights of a run
    given the chosen values (tests/capacity/test_auto.py has the probe's own checks).
    Covered in `make test` by: queue.md's `auto` command (tests/cli/test_docs_commands.py), the timed
    step leaving weights, optimizer and seed as they were (tests/training/test_calibration.py)."""
    common = [*TINY, "trainer.epochs=1", "trainer.deterministic=true", "model.dropout=0.5"]
    result = app("train", *common, "queue.workers=auto", "queue.max_size=auto", "hydra.run.dir=auto", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "auto" / "summary.json").read_text())
    chosen = summary["queue_auto"]
    assert chosen["workers"] >= 1 and chosen["max_size"] >= 1 and chosen["step_ms"] > 0 and chosen["sample_ms"] > 0
    assert f"workers={chosen['workers']}" in chosen["reason"] and f"max_size={chosen['max_size']}" in chosen["reason"]
    log = (tmp_path / "auto" / "train.log").read_text()
    assert f"queue auto: workers {chosen['workers']}, max_size {chosen['max_size']} (" in log
    assert f"queue: {chosen['workers']} processes, max_size {chosen['max_size']}" in log
    assert summary["queue_bytes"] == chosen["max_size"] * 4 * 32 * 32 * 3
    given = [f"queue.workers={chosen['workers']}", f"queue.max_size={chosen['max_size']}"]
    result = app("train", *common, *given, "hydra.run.dir=given", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "queue_auto" not in json.loads((tmp_path / "given" / "summary.json").read_text())
    auto, explicit = _trained(tmp_path / "auto"), _trained(tmp_path / "given")
    assert len(auto) == len(explicit) and all(np.array_equal(a, b) for a, b in zip(auto, explicit, strict=True))
    rows = [(tmp_path / run / "metrics.csv").read_text().splitlines()[1].split(",")[:3] for run in ("auto", "given")]
    assert rows[0] == rows[1]  # epoch, loss, accuracy
