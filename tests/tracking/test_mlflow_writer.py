"""logger=mlflow against a real MLflow SQLite store under tmp_path, with made-up scalar rows (no
training), read back with MLflow's own client: params, tags, artifacts, metrics sent at
checkpoints only, a resume that continues the same MLflow run without a step twice, SQLite's
lock under concurrent writers, and the store's defaults."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric

from app.errors import ConfigError
from app.schema import LoggerConfig, MlflowLoggerConfig, TensorBoardLoggerConfig
from app.tracking import dashboards, mlflow_writer
from app.tracking.mlflow_writer import RUN_FILE, MlflowWriter, retried, store

CONFIG = {"seed": 0, "tags": ["baseline", "team:vision", "stage=two"], "trainer": {"epochs": 2, "callbacks": []}}


def _writer(tmp_path, run="run", **node) -> MlflowWriter:
    (tmp_path / run).mkdir(exist_ok=True)
    return MlflowWriter(tmp_path / run, MlflowLoggerConfig(tracking_uri=_uri(tmp_path), **node))


def _uri(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _steps(client, run_id, key) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _loss(out, steps, scale=1.0) -> None:
    for step in steps:
        out.scalars("train", {"step/loss": scale / step}, step)


def test_a_run_holds_params_tags_metrics_and_artifacts(tmp_path):
    out = _writer(tmp_path, experiment="tiny")
    out.begin(CONFIG, trial="runs/one", step=0)
    (tmp_path / "run" / "metrics.csv").write_text("epoch,loss\n1,0.5\n")
    (tmp_path / "run" / "summary.json").write_text(json.dumps({"status": "running", "steps": 4}))
    _loss(out, range(1, 5))
    out.scalars("validation", {"epoch/loss": 0.7}, 4)
    client = MlflowClient(_uri(tmp_path))
    run_id = json.loads((tmp_path / "run" / RUN_FILE).read_text())["run_id"]
    assert client.get_metric_history(run_id, "step/loss") == []  # nothing before a checkpoint
    out.checkpointed(2)
    assert _steps(client, run_id, "step/loss") == [(1, 1.0), (2, 0.5)]
    out.checkpointed(4)
    out.finish_and_upload("completed")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "runs/one"
    assert client.get_experiment(run.info.experiment_id).name == "tiny"
    assert _steps(client, run_id, "step/loss") == [(1, 1.0), (2, 0.5), (3, 1 / 3), (4, 0.25)]
    assert _steps(client, run_id, "epoch/val_loss") == [(4, 0.7)]  # validation's beside training's
    assert run.data.params == {"seed": "0", "tags": "['baseline', 'team:vision', 'stage=two']",
                               "trainer.epochs": "2", "trainer.callbacks": "[]"}
    assert (run.data.tags["baseline"], run.data.tags["team"], run.data.tags["stage"]) == ("", "vision", "two")
    assert run.data.tags["run_dir"] == str((tmp_path / "run").resolve())
    artifacts = {f.path for f in client.list_artifacts(run_id)}
    assert artifacts == {"config.yaml", "summary.json", "metrics.csv"}  # no model.keras was written
    summary = json.loads(open(client.download_artifacts(run_id, "summary.json", str(tmp_path))).read())
    assert summary == {"status": "completed", "steps": 4}  # the run's end, not the file's `running`


def test_a_resume_continues_the_run_and_logs_no_step_twice(tmp_path):
    """Killed after the metrics of step 4 were sent but before its checkpoint was saved: the resume
    starts at step 2's checkpoint, redoes 3..6 with a changed config, and the store holds each step once."""
    first = _writer(tmp_path)
    first.begin(CONFIG, trial="run", step=0)
    _loss(first, range(1, 7))
    first.checkpointed(2)
    first.checkpointed(4)  # sent; the checkpoint of step 4 never written: killed here, no close
    again = _writer(tmp_path)
    again.begin({**CONFIG, "trainer": {"epochs": 3, "callbacks": []}}, trial="run", step=2)
    _loss(again, range(3, 7), scale=10.0)
    again.checkpointed(6)
    again.finish_and_upload("completed")
    client = MlflowClient(_uri(tmp_path))
    (run,) = client.search_runs([client.get_experiment_by_name("train").experiment_id])  # one MLflow run
    assert _steps(client, run.info.run_id, "step/loss") == [(1, 1.0), (2, 0.5), (3, 1 / 3), (4, 0.25),
                                                            (5, 2.0), (6, 10 / 6)]
    assert run.data.params["trainer.epochs"] == "2"  # params are written once: the change is a tag
    assert run.data.tags["changed_at_step_2.trainer.epochs"] == "3" and run.info.status == "FINISHED"
    # negative control: MLflow itself keeps a step logged twice
    client.log_batch(run.info.run_id, metrics=[Metric("step/loss", 9.0, 0, 6)])
    assert [s for s, _ in _steps(client, run.info.run_id, "step/loss")].count(6) == 2


def test_a_failed_run_ends_failed_with_its_files(tmp_path):
    out = _writer(tmp_path)
    out.begin(CONFIG, trial="run", step=0)
    out.finish_and_upload("failed")
    client = MlflowClient(_uri(tmp_path))
    run_id = json.loads((tmp_path / "run" / RUN_FILE).read_text())["run_id"]
    assert client.get_run(run_id).info.status == "FAILED"
    assert "config.yaml" in {f.path for f in client.list_artifacts(run_id)}


def test_several_loggers_at_once(tmp_path):
    logger = LoggerConfig(tensorboard=TensorBoardLoggerConfig(), mlflow=MlflowLoggerConfig(tracking_uri=_uri(tmp_path)))
    out = dashboards.writers(logger, tmp_path)
    assert [type(w) for w in out.chosen] == [dashboards.TensorBoardWriter, MlflowWriter]
    assert type(dashboards.writers(LoggerConfig(), tmp_path)) is dashboards.Writer  # logger=none


# A sweep's job: a fresh interpreter that imports the writer alone (a fork of this process, which holds
# JAX's and TensorFlow's threads, can deadlock; a spawn of this module would import them)
JOB = """
import json, sys
from pathlib import Path
from app.schema import MlflowLoggerConfig
from app.tracking.mlflow_writer import MlflowWriter
root, job = Path(sys.argv[1]), sys.argv[2]
out = MlflowWriter(root / job, MlflowLoggerConfig(tracking_uri=f"sqlite:///{root / 'mlflow.db'}"))
out.begin(json.loads(sys.argv[3]), trial=job, step=0)
for step in range(1, 41):
    out.scalars("train", {"step/loss": 1.0, "step/accuracy": 0.5}, step)
    out.checkpointed(step)
out.finish_and_upload("completed")
"""


def test_parallel_writers_on_a_new_sqlite_store(tmp_path):
    """Two processes at once on a store not made yet, as a sweep's parallel jobs: both finish."""
    jobs = []
    for job in ("0", "1"):
        (tmp_path / job).mkdir()
        jobs.append(subprocess.Popen([sys.executable, "-c", JOB, str(tmp_path), job, json.dumps(CONFIG)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for job in jobs:
        said = job.communicate(timeout=300)[0]
        assert job.returncode == 0, said[-2000:]
    client = MlflowClient(_uri(tmp_path))
    runs = client.search_runs([client.get_experiment_by_name("train").experiment_id])
    assert len(runs) == 2 and all(len(client.get_metric_history(r.info.run_id, "step/loss")) == 40 for r in runs)


def test_a_locked_database_is_retried_and_other_errors_are_not():
    calls = []

    def locked_twice():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "written"

    assert retried(locked_twice) == "written" and len(calls) == 3
    with pytest.raises(RuntimeError, match="locked"):  # past the deadline, the error is raised
        retried(lambda: locked_twice() if calls.clear() is None else None, deadline_s=0.0)
    with pytest.raises(ValueError):
        retried(lambda: (_ for _ in ()).throw(ValueError("bad key")))


def test_the_store_is_the_setting_else_the_variable_else_sqlite_under_outputs(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri, artifacts = store(None, tmp_path / "outputs")
    assert uri == f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}" and uri.startswith("sqlite:////")
    assert artifacts == (tmp_path / "outputs" / "mlflow-artifacts").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")
    assert store(None, tmp_path / "outputs") == ("http://tracking:5000", None)
    assert store(f"sqlite:///{tmp_path}/x/m.db")[1] == (tmp_path / "x" / "mlflow-artifacts").as_uri()


def test_a_sweeps_jobs_are_one_experiment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sweep" / "0").mkdir(parents=True)
    assert mlflow_writer._experiment_of(tmp_path / "sweep" / "0") == "train"  # negative control: no sweep yet
    (tmp_path / "sweep" / "multirun.yaml").write_text("{}")
    assert mlflow_writer._experiment_of(tmp_path / "sweep" / "0") == "sweep"


def test_without_mlflow_installed_the_message_says_how(monkeypatch):
    mlflow_writer.check_installed(LoggerConfig(tensorboard=TensorBoardLoggerConfig()))
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow fails as when it is not installed
    mlflow_writer.check_installed(LoggerConfig())  # negative control: no mlflow logger, no need
    with pytest.raises(ConfigError, match=r'logger=mlflow needs MLflow.*pip install -e "\.\[mlflow\]"'):
        mlflow_writer.check_installed(LoggerConfig(mlflow=MlflowLoggerConfig()))
