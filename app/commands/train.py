"""`python -m app train [overrides] [-m]`. A sweep's jobs each train in a fresh process, as TensorFlow keeps part of
every finished job that `clear_session` does not free (a sweep's resume: app/runs/sweeps.py)."""

from __future__ import annotations

import logging.config
import multiprocessing as mp
import signal
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from app.commands import failure_carried
from app.config import conf_dir
from app.errors import AppError, ConfigError, DataError, WorkerError
from app.processes import die_with_parent, enable_crash_report, startable
from app.runs import sweeps
from app.runs.rundir import monitored
from app.runs.saved import SAFE_PREFIXES
from app.schema import register
from app.training.trainer import run

register()
ERRORS = {cls.__name__: cls for cls in (AppError, ConfigError, DataError, WorkerError)}


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
@failure_carried
def main(cfg: DictConfig) -> float | None:
    """trainer.monitor's value at the last epoch (val_accuracy unless set): what a Hydra sweeper optimises."""
    hydra_cfg = HydraConfig.get()
    run_dir, overrides = Path(hydra_cfg.runtime.output_dir), list(hydra_cfg.overrides.task)
    if hydra_cfg.mode != RunMode.MULTIRUN:
        summary = run(cfg, run_dir, overrides)
        name, value = monitored(summary)
        epochs = summary["epochs_completed"]
        print(f"run dir: {run_dir}\n{epochs} epoch{'' if epochs == 1 else 's'} done, {name} {_rounded(value)}")
        return value
    how = ""
    if sweeps.resuming(hydra_cfg):  # a sweep's resume: this job may be done already, or go on in its folder
        step = sweeps.job_step(run_dir, overrides, epochs=cfg.trainer.epochs, safe=SAFE_PREFIXES)
        if step.action == "done":
            name, value = step.monitored
            print(f"job {hydra_cfg.job.num}: {run_dir}, {name} {_rounded(value)}: completed already, not trained "
                  "again")
            return value
        if step.action == "resume":
            cfg.resume, overrides, how = str(run_dir), step.overrides, ": resumed in its folder"
    logging_cfg = OmegaConf.to_container(hydra_cfg.job_logging, resolve=True)
    name, value = _in_fresh_process(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), run_dir, overrides,
                                    logging_cfg)
    print(f"job {hydra_cfg.job.num}: {run_dir}, {name} {_rounded(value)}{how}")
    return value


def _rounded(value: float | None) -> float | None:
    return value if value is None else round(value, 4)


def _in_fresh_process(plain: dict, run_dir: Path, overrides: list[str],
                      logging_cfg: dict) -> tuple[str, float | None]:
    context = mp.get_context("spawn")
    parent_end, child_end = context.Pipe(duplex=False)
    job = context.Process(target=_job, args=(plain, run_dir, overrides, logging_cfg, child_end), name="app-job")
    with startable("spawn"):
        job.start()
    child_end.close()
    try:
        outcome = parent_end.recv()
    except EOFError:  # it died without a word (SIGKILL, the OOM killer)
        job.join()
        raise WorkerError(f"the job's training process died (exit code {job.exitcode}); "
                          f"see {run_dir}/train.log.") from None
    except KeyboardInterrupt:  # Ctrl-C reached the job too: let it stop its workers and write its summary
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # more Ctrl-C must not cut that wait short
        job.join(timeout=30)
        raise
    job.join()
    kind, value = outcome
    if kind == "ok":
        return value
    if kind == "interrupted":
        raise KeyboardInterrupt
    name, message = value
    raise ERRORS.get(name, AppError)(message)


def _job(plain: dict, run_dir: Path, overrides: list[str], logging_cfg: dict, conn) -> None:
    """The job's own process: Hydra's logging for the job, then training."""
    die_with_parent(None)  # a sweep stopped by SIGKILL takes its running job along
    enable_crash_report()  # a spawned process: the sweep's own setting does not reach it
    logging.config.dictConfig(logging_cfg)
    try:
        conn.send(("ok", monitored(run(OmegaConf.create(plain), run_dir, overrides))))
    except KeyboardInterrupt:
        conn.send(("interrupted", None))
    except BaseException as error:  # noqa: BLE001 - carried to the sweep, which records and goes on
        conn.send(("error", (type(error).__name__, str(error))))
    finally:
        conn.close()
