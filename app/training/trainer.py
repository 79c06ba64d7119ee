"""A run before Keras loads: the checks that need no data, its lock, summary.json begun, how the run ended recorded."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import DictConfig

from app.augment import build_compose
from app.capacity.memory import kill_leftovers_and_delete_segments
from app.config import instantiate_each, load, to_plain
from app.console import print_config
from app.errors import AppError, config_error, explain
from app.frameworks import load_keras, use_backend
from app.processes import interrupts
from app.redact import redacted
from app.runs import checkpoint
from app.runs.checkpoint import RunState
from app.runs.rundir import Summary, hold_lock, log_apart, release_lock
from app.runs.saved import resumed_config
from app.tracking import mlflow_writer
from app.training import devices
from app.training.context import RunContext

log = logging.getLogger("app.train")


def run(cfg: DictConfig, run_dir: Path, overrides: list[str]) -> dict:
    """Train per `cfg` into `run_dir` (`resume`: continue there), process 0 holding its lock; summary.json's content."""
    run_dir = Path(run_dir)
    resumed = cfg.resume
    try:
        if resumed:  # the config is the checkpoint's, with the safe overrides (app/runs/saved.py)
            cfg = resumed_config(checkpoint.saved_config(run_dir), cfg, overrides)
        # Everything that can be checked without data, first; the callbacks need Keras.
        config = load(cfg)  # validated once; the one object every step below reads
        use_backend(config.trainer)  # before anything loads Keras
        mlflow_writer.check_installed(config.logger)
        if config.print_config:
            print_config(redacted(to_plain(config)), f"config of {run_dir}")
        build_compose(config.augment.transforms, config.data.image_size)  # strict: misspellings fail
        callbacks = user_callbacks(config.trainer.callbacks)
    except AppError as error:
        if not resumed:  # a sweep's report shows the job as failed, with the reason
            Summary(run_dir, overrides).update(status="failed", message=str(error))
        raise

    process = devices.expected_process(config.trainer)
    if process:  # one of several: process 0 writes the run directory, this one its own log and summary
        log_apart(run_dir, process)
    else:
        hold_lock(run_dir, f"python -m app train{' resume=...' if resumed else ''}")
    try:
        summary = Summary(run_dir, overrides, resumed_from=resumed,
                          name=f"summary.{process}.json" if process else "summary.json")
        isolation = kill_leftovers_and_delete_segments()
        summary.update(isolation=isolation, pid=os.getpid(), tags=list(config.tags),
                       backend=config.trainer.backend.value)  # never `auto`: app/config.py resolved it
        _train_recorded(RunContext(config=config, run_dir=run_dir, summary=summary,
                                   state=RunState(config=redacted(to_plain(config))), user_callbacks=callbacks))
    finally:
        release_lock(run_dir)
    return summary.content


def _train_recorded(run: RunContext) -> None:
    """Train, and record how it ended in summary.json and the log."""
    run_dir, summary, state = run.run_dir, run.summary, run.state
    try:
        with interrupts():
            _train(run)
        summary.update(status="completed")
    except KeyboardInterrupt:
        if summary.started:  # a resume stopped before it trained leaves the run as it was
            _record(summary, status="interrupted")
        log.warning("interrupted after step %d; %s", state.steps_done, _continue_hint(run_dir))
        raise
    except BaseException as error:
        hint = f"python -m app train resume={run_dir}" if checkpoint.has_checkpoint(run_dir) else None
        explained = explain(error, resume_hint=hint, where=str(run_dir))
        if summary.started:
            _record(summary, status="failed", message=str(explained))
            log.error("failed: %s", explained)
        else:  # a resume refused before it trained: nothing in the run changes
            log.error("not resumed (the run is as it was): %s", explained)
        if getattr(error, "worker_traceback", None):
            log.error("worker traceback:\n%s", error.worker_traceback)
        elif not isinstance(explained, AppError):  # a bug: keep its traceback
            log.exception("traceback")
            error.traceback_logged = True  # app/errors.py: not twice
        if explained is not error:
            raise explained from error
        raise


def user_callbacks(specs: list) -> list:
    """`trainer.callbacks` built (loading Keras) before data is read: bad entries fail early; no BackupAndRestore."""
    if not specs:
        return []
    keras = load_keras()  # Keras (and TensorFlow) start here: the callbacks are Keras objects

    built = instantiate_each(specs, "trainer.callbacks", keras.callbacks.Callback, "keras.callbacks.<Callback>")
    for i, callback in enumerate(built):
        if isinstance(callback, keras.callbacks.BackupAndRestore):
            raise config_error(f"trainer.callbacks[{i}]", specs[i]["_target_"],
                               "every run already checkpoints itself (each epoch, and every "
                               "trainer.checkpoint_every_steps) and continues at the exact step with "
                               "`train resume=<run dir>` or `resume=latest`; drop BackupAndRestore")
    return built


def _record(summary: Summary, **values) -> None:
    """The run's status in summary.json, as far as the disk allows (it may be the disk that failed)."""
    try:
        summary.update(**values)
    except OSError as error:
        log.error("could not record status %s in %s: %s", values.get("status"), summary.path, error)


def _continue_hint(run_dir: Path) -> str:
    saved = checkpoint.newest_first(run_dir)
    if not saved:
        return (f"no checkpoint was written yet, so there is nothing to resume: run the same command again "
                f"({run_dir} holds nothing a new run there would lose)")
    return (f"its last checkpoint is {saved[0].name}: `python -m app train resume={run_dir}` continues "
            "from there")


def _train(run: RunContext) -> None:
    load_keras()  # quietly (its start-up lines to the log), before session's imports would load it loudly
    from app.training import session  # the Keras side: it imports Keras at its top, so after use_backend

    session.train(run)
