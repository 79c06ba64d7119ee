"""Sweeps beyond the basic launcher: an Optuna search whose trials run as parallel joblib jobs, the
SLURM config; and a sweep stopped midway, finished in its own folder."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from loaders import wait_until

from app.data.sources.synthetic import dataset_dir_name
from app.runs.rundir import RunInUseError, check_unlocked

TINY = ["data.num_images=48", "data.source_size=96", "data.num_classes=3", "data.image_size=[32,32]",
        "data.batch_size=4", "model.widths=[8]", "trainer.epochs=1"]


def app(*args, cwd):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.mark.slow
def test_an_optuna_search_runs_its_trials_as_parallel_joblib_jobs_on_one_dataset(tmp_path):
    """Two trials at once: both jobs write one MLflow SQLite store at once (a new one: its tables
    made by one of them), neither fails on a locked database, and the sweep is one experiment, a
    run a job; each job returns its trainer.monitor (here val_loss, minimised), and the search the best of them."""
    from mlflow import MlflowClient

    result = app("train", "-m", "hparams_search=lr_optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2",
                 "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *TINY, "hydra.sweep.dir=sweep",
                 "logger=[csv,mlflow]", "trainer.monitor=val_loss", "hydra.sweeper.direction=minimize",
                 "queue.workers=0", cwd=tmp_path)  # each job builds its batches itself: the sweep is what this checks
    assert result.returncode == 0, result.stderr[-3000:]
    trials = [json.loads((tmp_path / "sweep" / job / "summary.json").read_text()) for job in ("0", "1")]
    for job, summary in enumerate(trials):
        assert summary["status"] == "completed" and summary["isolation"] == "clean"
        assert (tmp_path / "sweep" / str(job) / "scalars.csv").is_file()  # the other logger, beside MLflow
    # the jobs ran at once: each started before the other ended
    assert max(t["started_at"] for t in trials) < min(t["updated_at"] for t in trials), trials
    assert (tmp_path / "sweep" / "multirun.yaml").is_file()  # saved for the sweeper, which saves none
    found = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert found["best_value"] == min(t["val_loss"] for t in trials)  # the monitor's, not val_accuracy's
    assert [t["best"]["monitor"] for t in trials] == ["val_loss", "val_loss"]
    assert 1e-4 <= found["best_params"]["optimizer.learning_rate"] <= 1e-2
    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("sweep").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["sweep/0", "sweep/1"]
    assert all(r.info.status == "FINISHED" and r.data.metrics["epoch/val_accuracy"] >= 0 for r in runs)
    assert len({r.data.params["optimizer.learning_rate"] for r in runs}) == 2  # two rates tried
    # both jobs asked for the dataset (and its test split) at once: each was generated once, and no half
    # copy is left
    made = sorted(d.name for d in (tmp_path / "datasets" / "synthetic").iterdir())
    assert made == [dataset_dir_name(48, 96, 3, 0), f"{dataset_dir_name(48, 96, 3, 0)}-test12"]
    refused = app("train", "resume=sweep", cwd=tmp_path)  # its trials depend on earlier results
    assert refused.returncode == 2 and "Optuna" in refused.stderr, refused.stderr[-3000:]


@pytest.mark.slow
def test_slurm_launcher_config_composes(tmp_path):
    result = app("train", "hydra/launcher=slurm", "--cfg", "hydra", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    launcher = yaml.safe_load(result.stdout)["hydra"]["launcher"]
    assert launcher["_target_"].endswith("SlurmLauncher") and launcher["gpus_per_node"] == 1


def files_of(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder`: its bytes and its modification time (ns)."""
    return {p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def sweep_killed_after_job_1s_first_checkpoint(root: Path) -> Path:
    """A 2-job sweep SIGKILLed (a killed machine) once job 1 wrote a checkpoint, job 0 completed."""
    sweep = root / "sweep"
    tiny = [a for a in TINY if not a.startswith("trainer.epochs=")]
    args = [sys.executable, "-m", "app", "train", "-m", *tiny, "trainer.epochs=3", "trainer.checkpoint_every_steps=2",
            "queue.max_size=1,2", f"hydra.sweep.dir={sweep}"]
    process = subprocess.Popen(args, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not list((sweep / "1" / "checkpoints").glob("step-*/state.json")):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read().decode()[-3000:]
        time.sleep(0.01)
    with pytest.raises(RunInUseError, match="python -m app train -m"):  # the live sweep holds its folder's lock
        check_unlocked(sweep)
    process.kill()
    process.communicate(timeout=60)
    free = wait_until(lambda: not in_use(sweep / "1"), timeout_s=30)  # the job's process dies with its parent
    assert free, "job 1's process still holds its lock"
    return sweep


def in_use(folder: Path) -> bool:
    try:
        check_unlocked(folder)
    except RunInUseError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.exhaustive
def test_an_interrupted_sweep_is_finished_in_its_own_folder(tmp_path):
    """A sweep killed midway, resumed. Covered in `make test` by: README's resume of a sweep
    (tests/cli/test_docs_commands.py) and a run resumed from its checkpoint (test_resume_cli.py)."""
    sweep = sweep_killed_after_job_1s_first_checkpoint(tmp_path)
    done = json.loads((sweep / "0" / "summary.json").read_text())
    stopped = json.loads((sweep / "1" / "summary.json").read_text())
    assert done["status"] == "completed" and stopped["status"] == "running" and stopped["epochs_completed"] < 3
    job_0, job_1 = files_of(sweep / "0"), files_of(sweep / "1")
    result = app("train", f"resume={sweep}", "queue.workers=1", cwd=tmp_path)  # an override a resume may add
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"job 0: {sweep / '0'}, val_accuracy {round(done['val_accuracy'], 4)}: completed already, not " \
           "trained again" in result.stdout
    assert f"job 1: {sweep / '1'}, val_accuracy" in result.stdout and ": resumed in its folder" in result.stdout
    assert files_of(sweep / "0") == job_0  # not one byte or time of the completed job changed
    after = json.loads((sweep / "1" / "summary.json").read_text())
    assert after["status"] == "completed" and after["epochs_completed"] == 3
    assert "queue.workers=1" in after["resumed"][0]["overrides"] and after["overrides"] == stopped["overrides"]
    log = (sweep / "1" / "train.log").read_text()
    assert "continuing at step" in log  # from its checkpoint, not anew
    queues = [line.split("] - ", 1)[1] for line in log.splitlines() if "] - queue: " in line]
    assert queues[-1].startswith("queue: 1 ") and not queues[0].startswith("queue: 1 ")  # what the resume added
    assert [r["epoch"] for r in csv.DictReader((sweep / "1" / "metrics.csv").open())] == ["1", "2", "3"]
    changed = files_of(sweep / "1")  # negative control: the comparison sees a job that did change
    assert changed != job_1 and changed[".hydra/overrides.yaml"] == job_1[".hydra/overrides.yaml"]
    report = app("report", str(sweep), cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    rows = list(csv.DictReader((sweep / "report.csv").open()))
    assert [(r["queue.max_size"], r["status"]) for r in rows] == [("1", "completed"), ("2", "completed")]
