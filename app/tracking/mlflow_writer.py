"""logger=mlflow: the run as one MLflow run. Params (the flattened config) are write-once: a resume's change is a
`changed_at_step_<step>.<key>` tag. Metrics wait for a checkpoint; SQLite locks retried; mlflow.json keeps the id."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from pathlib import Path

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from app.errors import ConfigError
from app.io import held_exclusively, write_json
from app.runs.sweeps import is_sweep
from app.schema.training import MlflowLoggerConfig

log = logging.getLogger("app.train")
RUN_FILE = "mlflow.json"
ARTIFACTS = ("metrics.csv", "augmented.png", "model.keras")
BATCH = 500  # rows a log_batch call: MLflow takes at most 1000 metrics and 100 params or tags
RETRY_S = 300.0  # how long a write waits, all retries together, for a locked SQLite database
STATUSES = {"completed": "FINISHED", "interrupted": "KILLED", "failed": "FAILED"}
INSTALL = ('logger=mlflow needs MLflow, an optional extra: pip install -e ".[mlflow]" (mlflow-skinny with '
           "SQLAlchemy and Alembic, for the SQLite store; `mlflow ui` needs the full `mlflow` package), or "
           "choose another logger: logger=tensorboard.")


def flattened(config: dict, prefix: str = "") -> dict:
    """The config flattened to dotted keys and plain values (lists as text, None left out) for HParams and MLflow."""
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flattened(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        elif value is not None:
            flat[name] = str(value)
    return flat


def import_mlflow():
    """MLflow, or a ConfigError saying how to install it."""
    try:
        import mlflow  # the optional extra: imported only when a run logs to MLflow
    except ImportError:
        raise ConfigError(INSTALL) from None
    return mlflow


def check_installed(logger) -> None:
    """With logger=mlflow, MLflow installed: refused before any data is read, not at the first epoch."""
    if logger.mlflow is not None:
        import_mlflow()


def store(tracking_uri: str | None, outputs: Path = Path("outputs")) -> tuple[str, str | None]:
    """(the tracking URI, a new experiment's artifact location; None: the store's choice): `tracking_uri`, else
    MLFLOW_TRACKING_URI, else sqlite:///<outputs>/mlflow.db (`outputs` made); a SQLite store's artifacts beside it."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        root = outputs.resolve()
        root.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{root / 'mlflow.db'}", (root / "mlflow-artifacts").as_uri()
    database = _sqlite_file(uri)
    return uri, (database.parent / "mlflow-artifacts").as_uri() if database else None


def _sqlite_file(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]).resolve() if uri.startswith("sqlite:///") else None


@contextlib.contextmanager
def _tables_locked(uri: str):
    """A SQLite store's tables (and experiment) made under a file lock: two sweep jobs starting together would race."""
    database = _sqlite_file(uri)
    if database is None:
        yield
        return
    with held_exclusively(database.with_name(f"{database.name}.lock")):
        yield


def retried(call, *args, deadline_s: float = RETRY_S, **kwargs):
    """`call(*args, **kwargs)`, retried with doubling pauses (up to 2 s) while the store is locked, for `deadline_s`."""
    retrying = Retrying(retry=retry_if_exception(lambda error: "locked" in str(error)),
                        stop=stop_after_delay(deadline_s), wait=wait_exponential(multiplier=0.05, max=2.0),
                        before_sleep=lambda state: log.info("mlflow: the store is locked by another writer; trying "
                                                            "again in %.2f s", state.next_action.sleep),
                        reraise=True)
    return retrying(call, *args, **kwargs)


def metric_key(split: str, tag: str) -> str:
    """`epoch/loss` of validation as `epoch/val_loss`; characters MLflow refuses in a key as `_`."""
    if split != "train":
        head, _, name = tag.rpartition("/")
        tag = f"{head}/val_{name}" if head else f"val_{name}"
    return re.sub(r"[^\w./\- :]", "_", tag)


def tag_pairs(tags: list[str]) -> dict[str, str]:
    """The config's `tags` as MLflow's: `team:vision` (or `team=vision`) that pair, a bare word with an empty value."""
    pairs = {}
    for tag in map(str, tags):
        pair = re.fullmatch(r"([^=:]*)[=:](.*)", tag)
        key, value = pair.groups() if pair else (tag, "")
        pairs[metric_key("train", key.strip())] = value.strip()
    return pairs


class MlflowWriter:
    def __init__(self, run_dir: Path, node: MlflowLoggerConfig | None = None):
        self.run_dir, self.node = Path(run_dir), node or MlflowLoggerConfig()
        self.mlflow = import_mlflow()
        self.client, self.run_id, self.config = None, None, {}
        self.pending: list = []  # Metric rows not sent yet: sent at the next checkpoint
        self.stored: dict[str, int] = {}  # key → the last step the store holds (a resumed run's)

    def begin(self, config: dict, *, trial: str, step: int) -> None:
        """Makes the MLflow run, or continues the run directory's (a resume), and sends its params and tags."""
        self.config = config
        saved = self.run_dir / RUN_FILE
        record = self._record_moved(json.loads(saved.read_text())) if saved.is_file() else None
        uri, artifacts = (record["tracking_uri"], None) if record else store(self.node.tracking_uri)
        with _tables_locked(uri):
            self.client = self.mlflow.MlflowClient(uri)
            retried(self.client.search_experiments, max_results=1)  # the store, made now: its tables too
            run = self._continued(record) if record else None
            if run is None:
                run = self._created(uri, artifacts, trial)
        self.run_id = run.info.run_id
        params = {key: str(value)[:6000] for key, value in flattened(config).items()}
        old = run.data.params
        changed = {f"changed_at_step_{step}.{key}": value for key, value in params.items()
                   if key in old and old[key] != value}
        for key in changed:
            log.info("mlflow: %s (params are written once: the resumed run's value is this tag)", key)
        self._send(params={k: v for k, v in params.items() if k not in old},
                   tags={**tag_pairs(config.get("tags") or []), "run_dir": str(self.run_dir.resolve()), **changed})

    def _record_moved(self, record: dict) -> dict:
        """The MLflow record, repointed at `logger.mlflow.tracking_uri` (and written back) where a resume gives one."""
        given = self.node.tracking_uri
        if not given or given == record["tracking_uri"]:
            return record
        log.info("mlflow: logger.mlflow.tracking_uri=%s on resume: the run's store was %s", given,
                 record["tracking_uri"])
        record = {**record, "tracking_uri": given}
        write_json(self.run_dir / RUN_FILE, record)
        return record

    def _continued(self, record: dict):
        """The stored MLflow run, running again, each metric's last stored step noted; None when the store lost it."""
        try:
            run = retried(self.client.get_run, record["run_id"])
        except self.mlflow.exceptions.MlflowException as error:
            log.warning("mlflow: the run %s is not in %s (%s): a new MLflow run takes its place",
                        record["run_id"], record["tracking_uri"], str(error).splitlines()[0])
            return None
        for key in run.data.metrics:
            history = retried(self.client.get_metric_history, run.info.run_id, key)
            self.stored[key] = max((m.step for m in history), default=-1)
        retried(self.client.update_run, run.info.run_id, status="RUNNING")
        log.info("mlflow: continuing run %s in %s", run.info.run_id, record["tracking_uri"])
        return run

    def _created(self, uri: str, artifacts: str | None, trial: str):
        name = self.node.experiment or _experiment_of(self.run_dir)
        found = retried(self.client.get_experiment_by_name, name)
        experiment = found.experiment_id if found else retried(self.client.create_experiment, name,
                                                               artifact_location=artifacts)
        run = retried(self.client.create_run, experiment, run_name=_shown(Path(trial)))
        write_json(self.run_dir / RUN_FILE, {"tracking_uri": uri, "experiment_id": experiment,
                                             "run_id": run.info.run_id})
        log.info("mlflow: run %s in experiment %r of %s", run.info.run_id, name, uri)
        return run

    def scalars(self, split: str, values: dict, step: int) -> None:
        now = int(time.time() * 1000)
        self.pending += [self.mlflow.entities.Metric(metric_key(split, tag), float(value), now, int(step))
                         for tag, value in values.items()]

    def checkpointed(self, step: int) -> None:
        """Sends the metrics up to `step` (its checkpoint is saved next) but the steps the store holds already."""
        rows = [m for m in self.pending if m.step <= step and m.step > self.stored.get(m.key, -1)]
        self.pending = [m for m in self.pending if m.step > step]
        for start in range(0, len(rows), BATCH):
            retried(self.client.log_batch, self.run_id, metrics=rows[start:start + BATCH])

    def _send(self, *, params: dict, tags: dict) -> None:
        entities = self.mlflow.entities
        params = [entities.Param(k, v) for k, v in params.items()]
        tags = [entities.RunTag(k, str(v)[:8000]) for k, v in tags.items()]
        for start in range(0, max(len(params), len(tags)), 100):
            retried(self.client.log_batch, self.run_id, params=params[start:start + 100],
                    tags=tags[start:start + 100])

    def images(self, tag, batch, step) -> None:
        pass  # augmented.png, an artifact at the end

    def hparams(self, values: dict, trial: str) -> None:
        pass  # `begin` logs them as params

    def tags(self, tags: list[str]) -> None:
        pass  # `begin` sets them

    def finish_and_upload(self, status: str) -> None:
        """Uploads config.yaml, summary.json and ARTIFACTS, ends the run as `status`; drops post-checkpoint metrics."""
        if self.run_id is None:
            return
        summary_path = self.run_dir / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        retried(self.client.log_dict, self.run_id, self.config, "config.yaml")
        retried(self.client.log_dict, self.run_id, {**summary, "status": status}, "summary.json")
        for name in ARTIFACTS:
            if (self.run_dir / name).is_file():
                retried(self.client.log_artifact, self.run_id, str(self.run_dir / name))
        retried(self.client.set_terminated, self.run_id, STATUSES[status])
        self.run_id = None


def _experiment_of(run_dir: Path) -> str:
    """A sweep's folder (one experiment a sweep, its jobs its runs), else `train`."""
    parent = Path(run_dir).resolve().parent
    return _shown(parent) if is_sweep(parent) else "train"


def _shown(path: Path) -> str:
    """`path` relative to the working directory when under it, as the command lines give it."""
    path, here = Path(path).resolve(), Path.cwd().resolve()
    return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)


def log_evaluation(run_dir: Path, folder: Path) -> None:
    """Uploads an evaluation's folder to the run's MLflow run, as evaluate/<folder name>; nothing when it has none."""
    saved = Path(run_dir) / RUN_FILE
    if not saved.is_file():
        return
    record = json.loads(saved.read_text())
    try:
        with _tables_locked(record["tracking_uri"]):
            client = import_mlflow().MlflowClient(record["tracking_uri"])
    except ConfigError as error:  # the evaluation is written: say what is missing, fail nothing
        log.warning("%s not logged to MLflow: %s", folder, error)
        return
    retried(client.log_artifacts, record["run_id"], str(folder), f"evaluate/{Path(folder).name}")
    log.info("mlflow: %s logged to run %s", folder, record["run_id"])
