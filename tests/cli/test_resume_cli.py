"""Resume, for real: a run SIGKILLed mid-epoch and resumed equals the uninterrupted run (a run on a
prepared copy, killed and resumed: tests/cli/test_prepared_cli.py). Past the killed run, the module's
commands share a process (tests/docs_runner.py's OneProcess): TensorFlow loads once."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from docs_runner import OneProcess

from app.cli.argv import claim_and_rewrite_argv
from app.errors import ConfigError
from app.runs.rundir import release_lock
from app.runs.saved import latest_run

CONFIG = ["data.num_images=96", "data.source_size=128", "data.num_classes=3", "data.image_size=[96,96]",
          "data.batch_size=8", "model.widths=[32,64]", "model.dropout=0.3", "trainer.epochs=5",
          "trainer.checkpoint_every_steps=3", "trainer.steps_per_execution=3", "trainer.record_samples=true",
          "trainer.deterministic=true", "queue.workers=2", "scheduler=cosine", "optimizer.learning_rate=0.003",
          "trainer.callbacks=[{_target_: recording.LearningRates, path: '${hydra:runtime.output_dir}/lr.txt'}]",
          "logger=[tensorboard,mlflow]"]  # MLflow's store: <cwd>/outputs/mlflow.db
CHANGED = "data.max_image_pixels=89478486"  # safe to change on resume, and changes nothing here
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def app():
    """`python -m app <args>` in `cwd`, the module's commands in one process."""
    with OneProcess(env={**os.environ, "PYTHONPATH": str(TESTS)}) as one_process:  # recording.LearningRates
        yield one_process


def weights(checkpoint: Path) -> tuple[list[np.ndarray], int]:
    import keras

    import app.objectives  # noqa: F401 - registers the loss the checkpoints were compiled with

    model = keras.saving.load_model(checkpoint / "model.keras")
    return [np.array(v) for v in model.weights], int(model.optimizer.iterations.numpy())


def newest_checkpoint(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("step-*"))[-1]


def metric_rows(run: Path) -> list[tuple]:
    rows = csv.DictReader((run / "metrics.csv").open())
    return [(r["epoch"], r["loss"], r["accuracy"], r["val_loss"], r["val_accuracy"]) for r in rows]


def start_train(root: Path, config: list[str], name: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app", "train", *config, f"hydra.run.dir={name}"], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(TESTS)})


def kill_each_after_a_mid_epoch_checkpoint(root: Path, started: dict[str, subprocess.Popen]) -> None:
    """SIGKILL each run (by its folder's name) once it has a checkpoint inside epoch 2 or later."""
    deadline = time.monotonic() + 300
    while started and time.monotonic() < deadline:
        for name, process in list(started.items()):
            assert process.poll() is None, f"run {name} ended before it could be interrupted: " + \
                process.stderr.read().decode()[-2000:]
            for state in (root / name / "checkpoints").glob("step-*/state.json"):
                try:
                    saved = json.loads(state.read_text())
                except FileNotFoundError:  # pruned meanwhile
                    continue
                if saved["epoch"] >= 1 and not saved["epoch_complete"]:
                    process.kill()  # SIGKILL: no cleanup, as the OOM killer or a pre-emption does
                    process.wait()
                    del started[name]
                    break
        time.sleep(0.02)
    assert not started, f"not interrupted in time: {sorted(started)}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, app):
    """B: SIGKILLed after a checkpoint inside epoch 2+, then resumed. A: the same config, uninterrupted."""
    root = tmp_path_factory.mktemp("resume")
    kill_each_after_a_mid_epoch_checkpoint(root, {"B": start_train(root, CONFIG, "B")})
    point = newest_checkpoint(root / "B")
    assert (point / "state.json").exists(), sorted(p.name for p in (root / "B" / "checkpoints").rglob("*"))
    resumed = json.loads((point / "state.json").read_text()), weights(point)
    # A, then B resumed
    for argv in (["train", *CONFIG, "hydra.run.dir=A"], ["train", f"resume={root / 'B'}", CHANGED],
                 ["evaluate", f"resume={root / 'B'}"]):
        done = app(*argv, cwd=root)
        assert done.returncode == 0, done.stderr[-3000:]
    return (root / "A", root / "B", *resumed)


@pytest.mark.slow
def test_resumed_run_continues_at_the_next_step(runs):
    _, run_b, point, _ = runs
    log = (run_b / "train.log").read_text()
    assert f"step {point['step']} done" in log and f"continuing at step {point['step'] + 1}" in log
    assert log.index("epoch 1/5") < log.index("continuing at step")  # the log goes on, not anew
    assert not point["epoch_complete"] and point["batch_in_epoch"] > 0


@pytest.mark.slow
def test_resumed_run_trained_on_the_same_samples(runs):
    run_a, run_b, _, _ = runs
    # bytes: the line ends too (a resume once rewrote the rows it kept with \r\n, then appended \n)
    assert (run_b / "samples.csv").read_bytes() == (run_a / "samples.csv").read_bytes()


@pytest.mark.slow
def test_resumed_run_ends_with_the_same_weights(runs):
    run_a, run_b, _, before = runs
    final_a, steps_a = weights(newest_checkpoint(run_a))
    final_b, steps_b = weights(newest_checkpoint(run_b))
    assert newest_checkpoint(run_a).name == newest_checkpoint(run_b).name and steps_a == steps_b
    assert all(np.array_equal(x, y) for x, y in zip(final_a, final_b, strict=True))
    # negative control: the checkpoint B resumed from (an older state) differs from the end
    assert not all(np.array_equal(x, y) for x, y in zip(before[0], final_a, strict=True))


@pytest.mark.slow
def test_the_learning_rate_at_every_step_is_the_uninterrupted_runs(runs):
    """scheduler=cosine: the rate is a function of the optimizer's step counter, which the
    checkpoint keeps; the steps B redid after its resume got the rates they had before."""
    import recording

    run_a, run_b, _, _ = runs
    rates_a, rates_b = recording.rates(run_a / "lr.txt"), recording.rates(run_b / "lr.txt")
    assert rates_a == rates_b and len(rates_a) == 5 * 3  # five epochs of three calls
    assert len(set(rates_a.values())) > 10  # negative control: the rate does change along the run


@pytest.mark.slow
def test_the_dashboards_events_hold_each_step_once_as_uninterrupted(runs):
    """B's TensorBoard events after its resume: the steps after the checkpoint it resumed from
    were cut before they were redone, and what remains is A's."""
    import tensorflow as tf
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def scalars(run: Path, split: str, tag: str) -> list[tuple[int, float]]:
        events = EventAccumulator(str(run / "tensorboard" / split), size_guidance={"tensors": 0},
                                  purge_orphaned_data=False)  # TensorBoard would hide repeated steps itself
        events.Reload()
        return [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in events.Tensors(tag)]

    run_a, run_b, _, _ = runs
    for split, tag in (("train", "step/loss"), ("train", "epoch/accuracy"), ("validation", "epoch/loss")):
        a, b = scalars(run_a, split, tag), scalars(run_b, split, tag)
        assert len({step for step, _ in b}) == len(b) and a == b, (split, tag)
    assert len(scalars(run_a, "train", "step/loss")) == 5 * 3  # a read at each call: checkpoints every 3


@pytest.mark.slow
def test_the_mlflow_run_is_continued_with_each_step_once_as_uninterrupted(runs):
    """B's MLflow run, read back with MLflow's client: one run for B (its resume continued it),
    each step once with A's values, the changed override a tag beside the write-once param, and the
    run's files and its evaluation (the confusion matrix) as artifacts."""
    from mlflow import MlflowClient

    run_a, run_b, point, _ = runs
    client = MlflowClient(f"sqlite:///{run_a.parent / 'outputs' / 'mlflow.db'}")
    ids = [json.loads((run / "mlflow.json").read_text())["run_id"] for run in (run_a, run_b)]
    listed = client.search_runs([client.get_experiment_by_name("train").experiment_id])
    assert sorted(r.info.run_id for r in listed) == sorted(ids) and ids[0] != ids[1]  # B: one run, not two
    for key in ("step/loss", "epoch/accuracy", "epoch/val_loss"):
        a, b = ([(m.step, m.value) for m in client.get_metric_history(i, key)] for i in ids)
        last = max(step for step, _ in b)
        assert len({step for step, _ in b}) == len(b) and sorted(x for x in a if x[0] <= last) == sorted(b), key
    assert len(client.get_metric_history(ids[1], "step/loss")) == 5 * 3
    b = client.get_run(ids[1])
    assert b.info.status == "FINISHED" and b.data.params["trainer.epochs"] == "5"
    assert b.data.params["data.max_image_pixels"] == "89478485"  # the first start's: params are written once
    assert b.data.tags[f"changed_at_step_{point['step']}.data.max_image_pixels"] == "89478486"
    artifacts = {f.path for f in client.list_artifacts(ids[1])}
    assert {"config.yaml", "summary.json", "metrics.csv", "model.keras", "augmented.png"} <= artifacts
    (evaluation,) = client.list_artifacts(ids[1], "evaluate")
    assert f"{evaluation.path}/confusion.png" in {f.path for f in client.list_artifacts(ids[1], evaluation.path)}
    assert not client.list_artifacts(ids[0], "evaluate")  # negative control: A was not evaluated


@pytest.mark.slow
def test_metrics_rows_continue_without_gaps_or_duplicates(runs):
    run_a, run_b, _, _ = runs
    assert metric_rows(run_b) == metric_rows(run_a)
    assert [r[0] for r in metric_rows(run_b)] == ["1", "2", "3", "4", "5"]
    summary = json.loads((run_b / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["epochs_completed"] == 5
    assert summary["resumed"][0]["from"] == str(run_b)
    overrides = (run_b / ".hydra" / "overrides.yaml").read_text()
    assert "queue.workers=2" in overrides and "resume" not in overrides  # the first start's, not rewritten


@pytest.mark.slow
def test_unsafe_override_is_refused(runs, app):
    run_a = runs[0]  # trained with MLflow (a logger the run lacks: tests/cli/test_evaluate_predict_cli.py)
    before = {p: p.read_bytes() for p in run_a.rglob("*") if p.is_file()}
    assert (run_a / ".lock") in before
    refusals = {(run_a, "data.batch_size=4"): "`data.batch_size` cannot change for a run that exists",
                # a logger's keys: composed on the run's own loggers, then held to the same rule
                (run_a, "logger.mlflow.experiment=x"): "`logger.mlflow.experiment` cannot change for a run that exists"}
    for (run, override), said in refusals.items():
        result = app("train", f"resume={run}", override, cwd=run.parent)
        assert result.returncode == 2 and said in result.stderr and "a bug" not in result.stderr, result.stderr
    # refused: nothing in the runs changed, the lock file (a PID while one is held) included
    assert {p: p.read_bytes() for p in run_a.rglob("*") if p.is_file()} == before


@pytest.mark.slow
@pytest.mark.exhaustive
def test_corrupt_newest_checkpoint_falls_back(runs, app):
    """Through the CLI. Covered in `make test` by: the resume point passing over half-written and
    corrupt checkpoints (tests/runs/test_checkpoint.py)."""
    run_a, _, _, _ = runs
    copy = run_a.parent / "C"
    shutil.copytree(run_a, copy)
    newest, previous = sorted((copy / "checkpoints").glob("step-*"))[-1:-3:-1]
    whole = (newest / "model.keras").read_bytes()
    (newest / "model.keras").write_bytes(whole[:len(whole) // 2])  # cut short, as by a full disk
    # the MLflow store moved too: the resume is given its new URI
    store, moved = run_a.parent / "outputs" / "mlflow.db", run_a.parent / "moved.db"
    shutil.copy(store, moved)
    result = app("train", f"resume={copy}", "trainer.epochs=6", f"logger.mlflow.tracking_uri=sqlite:///{moved}",
                 cwd=run_a.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    log = (copy / "train.log").read_text()
    assert f"checkpoint {newest} cannot be loaded (ValueError: model.keras is there ({len(whole) // 2} bytes) but " \
           "is not a whole .keras archive" in log and f"resuming from {previous.name}" in log
    assert "File not found" not in log  # Keras's word for a file cut short
    assert [r[0] for r in metric_rows(copy)] == ["1", "2", "3", "4", "5", "6"]
    # the copy goes on in A's MLflow run (mlflow.json came with it), in the moved store: the steps
    # after `previous`, which the store holds already, are not sent again
    from mlflow import MlflowClient

    record = json.loads((copy / "mlflow.json").read_text())
    assert record["tracking_uri"] == f"sqlite:///{moved}"
    client = MlflowClient(record["tracking_uri"])
    steps = [m.step for m in client.get_metric_history(record["run_id"], "step/loss")]
    assert len(steps) == len(set(steps)) == 6 * 3 and client.get_run(record["run_id"]).info.status == "FINISHED"
    old = MlflowClient(f"sqlite:///{store}")  # negative control: the old store got nothing more
    assert len(old.get_metric_history(record["run_id"], "step/loss")) == 5 * 3


@pytest.mark.slow
def test_resume_needs_a_run_with_checkpoints(tmp_path, app):
    result = app("train", f"resume={tmp_path / 'nothing'}", cwd=tmp_path)
    assert result.returncode == 2 and "resume" in result.stderr and "Traceback" not in result.stderr
    result = app("train", "resume=latest", cwd=tmp_path)
    assert result.returncode == 2 and "no training run" in result.stderr


def test_latest_is_the_run_with_the_newest_checkpoint(tmp_path):
    for name, age in (("old", 100), ("new", 10), ("empty", 0)):
        (tmp_path / "outputs" / name / "checkpoints").mkdir(parents=True)
        if name != "empty":
            state = tmp_path / "outputs" / name / "checkpoints" / "step-00000001" / "state.json"
            state.parent.mkdir()
            state.write_text("{}")
            os.utime(state, (time.time() - age, time.time() - age))
    assert latest_run(tmp_path / "outputs") == (tmp_path / "outputs" / "new").resolve()
    argv = claim_and_rewrite_argv(["resume=latest", "queue.workers=1"], tmp_path / "outputs")
    run = (tmp_path / "outputs" / "new").resolve()
    assert argv == ["queue.workers=1", f"resume='{run}'", f"hydra.run.dir='{run}'", "hydra.output_subdir=null"]
    release_lock(run)
    # `resume=` left empty (an unset shell variable) is refused, never a fresh run in its place
    with pytest.raises(ConfigError, match="config key `resume` is empty"):
        claim_and_rewrite_argv(["resume=", "queue.workers=1"], tmp_path / "outputs")
    # nothing to resume: a new directory of its own is claimed
    (fresh,) = claim_and_rewrite_argv(["queue.workers=1"], tmp_path / "outputs")[1:]
    assert fresh.startswith("hydra.run.dir=") and Path(fresh.split("=", 1)[1].strip("'")).is_dir()
    # two sweeps started in the same second: two sweep directories
    sweeps = [claim_and_rewrite_argv(["-m", "queue.workers=1,2"], tmp_path / "outputs")[-1] for _ in range(2)]
    assert sweeps[0].startswith("hydra.sweep.dir=") and sweeps[0] != sweeps[1]


def test_the_tasks_of_one_srun_share_a_run_and_only_process_0_locks_it(tmp_path, monkeypatch):
    from app.runs.rundir import _held

    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    dirs = []
    for task in ("0", "1"):
        monkeypatch.setenv("SLURM_PROCID", task)
        dirs.append(claim_and_rewrite_argv(["trainer.strategy=data_parallel"], tmp_path / "outputs")[-1])
    assert dirs[0] == dirs[1] and dirs[0].endswith("/slurm-77'")
    run = tmp_path / "outputs" / "run"
    (run / "checkpoints").mkdir(parents=True)
    claim_and_rewrite_argv([f"resume={run}"], tmp_path / "outputs")  # process 1 (SLURM_PROCID): no lock
    assert run.resolve() not in _held
    monkeypatch.setenv("SLURM_PROCID", "0")
    claim_and_rewrite_argv([f"resume={run}"], tmp_path / "outputs")  # negative control: process 0 takes it
    assert run.resolve() in _held
    release_lock(run)
    monkeypatch.setenv("SLURM_NTASKS", "1")  # one task: a claimed directory of its own, as before
    alone = claim_and_rewrite_argv(["queue.workers=1"], tmp_path / "outputs")[-1]
    assert "slurm" not in alone


@pytest.mark.slow
def test_a_folder_that_holds_a_run_is_refused_unless_overwrite_moves_it_aside(tmp_path, monkeypatch):
    from app.errors import ConfigError
    from app.runs.rundir import RunInUseError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    # negative control: nothing to lose
    assert claim_and_rewrite_argv(["hydra.run.dir=empty"]) == ["hydra.run.dir=empty"]
    (tmp_path / "notes").write_text("a file")
    with pytest.raises(ConfigError, match="`hydra.run.dir` = '.*notes' is not allowed: a folder: .*notes is a file"):
        claim_and_rewrite_argv(["hydra.run.dir=notes"])
    assert (tmp_path / "notes").read_text() == "a file"
    (tmp_path / "refused").mkdir()  # a run refused at start (a config error): nothing to resume, nothing to lose
    (tmp_path / "refused" / "summary.json").write_text('{"status": "failed"}')
    assert claim_and_rewrite_argv(["hydra.run.dir=refused"]) == ["hydra.run.dir=refused"]
    (tmp_path / "stopped").mkdir()  # a run with its history but no checkpoint: kept, and no resume offered
    (tmp_path / "stopped" / "metrics.csv").write_text("epoch\n1\n")
    with pytest.raises(ConfigError, match=r"stopped holds a run already \(its metrics.csv\).*Choose another") as told:
        claim_and_rewrite_argv(["hydra.run.dir=stopped"])
    assert "resume=" not in str(told.value)
    run = tmp_path / "R"
    (run / "checkpoints" / "step-00000004").mkdir(parents=True)
    (run / "summary.json").write_text('{"status": "completed"}')
    with pytest.raises(ConfigError, match="R holds a run already") as refused:
        claim_and_rewrite_argv(["hydra.run.dir=R"])
    assert "resume=R" in str(refused.value) and "overwrite=true" in str(refused.value)
    assert "(its checkpoints)" in str(refused.value)  # only what is there
    assert (run / "summary.json").exists()
    (tmp_path / "S" / "0").mkdir(parents=True)  # a sweep's folder whose job holds a run
    (tmp_path / "S" / "0" / "metrics.csv").write_text("epoch\n1\n")
    with pytest.raises(ConfigError, match="S holds a run already"):
        claim_and_rewrite_argv(["-m", "seed=1,2", "hydra.sweep.dir=S"])
    with pytest.raises(ConfigError, match="`overwrite` = 'yes' is not allowed: true or false"):
        claim_and_rewrite_argv(["hydra.run.dir=R", "overwrite=yes"])
    with pytest.raises(ConfigError, match="false with `resume`"):
        claim_and_rewrite_argv([f"resume={run}", "overwrite=true"])
    holder = subprocess.Popen(  # a live run is never moved
        [sys.executable, "-c", "import sys; from app.runs.rundir import hold_lock; "
         "hold_lock(sys.argv[1], 'a test'); print('held', flush=True); sys.stdin.read()", str(run)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunInUseError):
            claim_and_rewrite_argv(["hydra.run.dir=R", "overwrite=true"])
        assert (run / "summary.json").exists()
    finally:
        holder.kill()
        holder.wait()
    assert claim_and_rewrite_argv(["hydra.run.dir=R", "overwrite=true"]) == ["hydra.run.dir=R", "overwrite=true"]
    assert not run.exists() and (tmp_path / "R.old" / "checkpoints" / "step-00000004").is_dir()
    run.mkdir()
    (run / "model.keras").write_bytes(b"the next run's")
    claim_and_rewrite_argv(["hydra.run.dir=R", "overwrite=true"])  # a second time: beside the first, never over it
    assert (tmp_path / "R.old-1" / "model.keras").read_bytes() == b"the next run's"
    assert (tmp_path / "R.old" / "summary.json").exists()


@pytest.mark.slow
@pytest.mark.exhaustive
def test_sigterm_just_after_an_epochs_metrics_row_leaves_a_run_that_resumes(tmp_path, app):
    """The row, model.keras and the checkpoint of an epoch are written together: a SIGTERM that
    lands between them waits for the checkpoint, so every row has one and resume goes on.
    Covered in `make test` by: SIGTERM and Ctrl-C inside an epoch (tests/cli/test_train_cli.py) and
    a killed run resumed (this file's fixture)."""
    tiny = ["data.num_images=24", "data.source_size=96", "data.num_classes=3", "data.image_size=[32,32]",
            "data.batch_size=4", "model.widths=[8]", "trainer.epochs=1", "queue.workers=1", "hydra.run.dir=run",
            "trainer.record_samples=true"]
    (tmp_path / "run").mkdir()  # where a run stopped before its first checkpoint: its step rows are no history
    (tmp_path / "run" / "summary.json").write_text('{"status": "interrupted"}')
    (tmp_path / "run" / "samples.csv").write_text("step,epoch,batch,indices\n1,1,0,99 99 99 99\n")
    process = subprocess.Popen([sys.executable, "-m", "app", "train", *tiny], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    metrics, deadline = tmp_path / "run" / "metrics.csv", time.monotonic() + 240
    while not (metrics.exists() and len(metrics.read_bytes().splitlines()) >= 2):  # epoch 1's row is there
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read().decode()[-3000:]
        time.sleep(0.002)
    process.terminate()
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr.decode()[-3000:]
    run = tmp_path / "run"
    states = [json.loads(p.read_text()) for p in (run / "checkpoints").glob("step-*/state.json")]
    assert {str(s["epoch"] + 1) for s in states if s["epoch_complete"]} >= {r[0] for r in metric_rows(run)}
    resumed = app("train", f"resume={run}", cwd=tmp_path)  # nothing left to train: it is accepted, and ends
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r[0] for r in metric_rows(run)] == ["1"]
    samples = [row.split(",")[0] for row in (run / "samples.csv").read_text().splitlines()[1:]]
    assert samples == [str(step) for step in range(1, len(samples) + 1)] and "99 99" not in samples[0]


def test_a_new_run_deletes_only_what_a_run_stopped_before_its_first_checkpoint_recorded(tmp_path):
    from app.runs.rundir import delete_partial_records

    for name in ("stopped", "kept"):
        (tmp_path / name / "tensorboard" / "train").mkdir(parents=True)
        for file in ("summary.json", "train.log", "samples.csv", "scalars.csv", "bad_samples.txt"):
            (tmp_path / name / file).write_text("x")
    (tmp_path / "kept" / "checkpoints" / "step-00000005").mkdir(parents=True)  # a run: nothing of it goes
    before = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "kept").rglob("*"))
    for name in ("stopped", "kept"):
        delete_partial_records(tmp_path / name)
    assert sorted(p.name for p in (tmp_path / "stopped").iterdir()) == ["summary.json", "train.log"]
    assert sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "kept").rglob("*")) == before
