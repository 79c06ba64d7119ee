"""The command line before Hydra sees it: which directory a command writes, and `resume`.

- `resume=<run dir>` or `resume=latest` is resolved here, before Hydra makes a directory:
  `train` continues in the run directory itself (taking its lock first, app/training/rundir.py), and
  `evaluate`/`predict`/`export` write into `<run dir>/<command>/<date>_<time>/`. The task then takes the
  config from the checkpoint: only what is safe to change may be overridden. `train
  resume=<sweep dir>` runs the sweep again in its folder, each job done, resumed or started
  (app/training/sweeps.py).
- A new run's directory is claimed here, atomically: two runs started in the same second (or
  two sweeps) never share one; the second gets `<time>-1`. `hydra.run.dir=`/`hydra.sweep.dir=`
  given on the command line are the user's to choose and are left alone. The tasks of one srun
  (SLURM_NTASKS > 1) are the processes of one data_parallel run: they share
  `<date>/slurm-<job id>[.<step id>]`, and only process 0 takes a resumed run's lock.
- Values with spaces or non-ASCII characters (paths, mostly) are quoted for Hydra's override
  grammar (app/overrides.py reads and quotes them); a replaced key is refused naming its
  successor, and a run saved with old keys is read back in today's (app/training/migrate.py).
- `open_run` (`read_run_setting_backend`, then `keras_for_run`): a finished run opened again for `evaluate` and
  `predict`, its config re-typed (their Keras side, the checkpoint or model.keras loaded, is
  app/training/restore.py's).
Orchestration only: never imports Keras, TensorFlow or the loader at its top (app/__main__.py
imports it before any backend is chosen).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from app.config import load
from app.errors import ConfigError, config_error
from app.frameworks import load_keras, query_devices_quietly, use_backend
from app.overrides import key_of, quote_override, quoted, value_of
from app.schema import COMMAND_KEYS, Backend, Config
from app.training import checkpoint, sweeps
from app.training.migrate import ON_A_RUN, migrated, refuse_keys_of_other_commands, refuse_moved_keys, renamed_choosers
from app.training.rundir import check_unlocked, claim_dir, hold_lock, holds_run, move_aside, run_files

# What a run may change when it resumes: how long, how it logs, how it loads, and which files are bad
# samples and what becomes of them (the advice a bad sample prints must work on a resumed run too).
# The storage's credentials too: a run's saved config holds its secrets as <redacted> (app/redact.py).
# An MLflow store moved elsewhere (the run's MLflow run goes on there) is given again by its URI.
STORAGE = "data.storage_options"
MLFLOW_STORE = "logger.mlflow.tracking_uri"
SAFE_PREFIXES = ("trainer.epochs", "trainer.log_every_steps", "queue.", "data.on_bad_sample", "data.max_bad_fraction",
                 "data.max_image_pixels", STORAGE, MLFLOW_STORE)
# Hydra's flags that print or inspect instead of running: no directory is claimed for them.
INFO_FLAGS = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc")
# Directories claimed in this process: app/__main__.py removes those left empty (a config error
# that Hydra finds after the claim must not leave an empty run directory behind).
CLAIMED: list[Path] = []



def claim_and_rewrite_argv(argv: list[str], outputs: Path = Path("outputs"), *, word: str = "train") -> list[str]:
    """The overrides of `python -m app <word> ...`, rewritten as the module docstring says."""
    refuse_moved_keys(argv)
    refuse_keys_of_other_commands(argv, word)
    argv = [quote_override(a) for a in renamed_choosers(argv)]
    info = any(key_of(a) in INFO_FLAGS for a in argv)
    multirun = "-m" in argv or "--multirun" in argv
    value = value_of(argv, "resume") if word in ("train", *ON_A_RUN) else None
    stamp = time.strftime("%Y-%m-%d"), time.strftime("%H-%M-%S")
    on_a_run = word in ON_A_RUN
    if value == "" and not on_a_run:  # `resume=$RUN` with RUN unset: never a fresh run in its place
        raise ConfigError("config key `resume` is empty: give the run to continue, e.g. python -m app train "
                          "resume=outputs/<date>/<time> (or resume=latest); leave `resume` out to start a new run.")
    if value in (None, "", "null", "None"):
        if on_a_run and not info:
            raise ConfigError(f"config key `resume` is missing: `{word}` works on a training run, e.g. "
                              f"python -m app {word} resume=outputs/<date>/<time> (or resume=latest).")
        key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
        if info or value_of(argv, key) is not None:
            if not info and word == "train" and _process_of(argv) == 0:
                _refuse_or_move_aside(Path(value_of(argv, key)).expanduser(), _overwrite(argv), key)
            return argv
        if not multirun and _slurm_tasks() > 1:  # srun's tasks are the processes of one run: one directory
            shared = Path(outputs) / stamp[0] / f"slurm-{os.environ.get('SLURM_JOB_ID', 'job')}"
            shared = shared.with_name(f"{shared.name}.{os.environ['SLURM_STEP_ID']}") \
                if os.environ.get("SLURM_STEP_ID") else shared
            shared.mkdir(parents=True, exist_ok=True)
            return [*argv, f"{key}={quoted(str(shared))}"]
        base = Path(outputs) / "multirun" if multirun else Path(outputs)
        CLAIMED.append(claim_dir(base / stamp[0] / stamp[1]))
        return [*argv, f"{key}={quoted(str(CLAIMED[-1]))}"]
    if _overwrite(argv) and word != "export":  # export's: what is at export.out (app/commands/export.py)
        raise config_error("overwrite", True, "false with `resume`, which continues the run in its own folder "
                           "(overwrite=true moves a finished run aside to start a new one there)")
    run_dir = latest_run(outputs) if value == "latest" else Path(value).expanduser().resolve()
    if sweeps.is_sweep(run_dir):
        return _sweep_resumed(run_dir, [a for a in argv if key_of(a) != "resume"], word=word, info=info)
    if multirun:
        raise config_error("resume", value, f"a sweep's folder with -m: {run_dir} is one run's. Leave -m out to "
                           "resume it, or give the sweep's folder to finish every job of a sweep: python -m app "
                           "train resume=outputs/multirun/<date>/<time>")
    if not (run_dir / "checkpoints").is_dir():
        raise checkpoint.nothing_to_resume(run_dir)
    kept = [a for a in argv if key_of(a) != "resume"]
    # composed on the default data group (synthetic: no test_path, no storage_options) before the run's is read
    forced = ("data.test_path", STORAGE) if word == "evaluate" else (STORAGE,)
    kept = [f"++{a.lstrip('+')}" if key_of(a).startswith(forced) and a[:1] != "~" else a for a in kept]
    kept += _loggers_of_run(run_dir, kept)
    if on_a_run:
        where = run_dir / word / f"{stamp[0]}_{stamp[1]}"
        if not info:
            CLAIMED.append(where := claim_dir(where))
    else:
        where = run_dir
        if not info and _process_of(argv) == 0:  # process 0 of a several-process run holds the lock
            hold_lock(run_dir, "python -m app train resume=...")
    return [*kept, f"resume={quoted(str(run_dir))}", f"hydra.run.dir={quoted(str(where))}", "hydra.output_subdir=null"]


def _loggers_of_run(run_dir: Path, given: list[str]) -> list[str]:
    """`logger=[...]`, the run's own loggers, where a logger's key is given on a resume: composed
    on the default logger group, another logger's node is null and takes no key. A key of a
    logger the run does not have is refused."""
    keys = [key_of(a) for a in given if key_of(a).startswith("logger.")]
    if not keys:
        return []
    loggers = _loggers(checkpoint.saved_config(run_dir))
    for key in keys:
        _check_safe(key)
        name = key.split(".")[1]
        if name not in loggers:
            raise ConfigError(f"config key `{key}` names a logger this run does not have (it logs to: "
                              f"{', '.join(loggers) or 'none'}); a run's loggers are the ones it was trained "
                              f"with. Leave `{key}` out, or start a new run with logger={name}.")
    return [f"logger=[{','.join(loggers)}]"]


def _loggers(config) -> list[str]:
    """The loggers a config has: the names of its `logger` node's non-null entries."""
    return [name for name, node in (config.get("logger") or {}).items() if node is not None]


def _sweep_resumed(sweep: Path, given: list[str], *, word: str, info: bool) -> list[str]:
    """`train resume=<sweep dir>`: the sweep's own command line again (app/training/sweeps.py),
    with only what a single resume may change added; `evaluate`/`predict` need a job's folder."""
    if word != "train":
        raise sweeps.not_a_run(sweep, word)
    if info:  # Hydra prints or inspects: nothing runs, nothing is checked
        return [*given, f"resume={quoted(str(sweep))}"]
    for arg in given:
        if not arg.startswith("-") and not key_of(arg).startswith(("hydra.", "hydra/")):
            _check_safe(key_of(arg))
    sweeps.check_unlocked_sweep(sweep)
    return sweeps.resume_argv(sweep, given)


def _check_safe(key: str, safe: tuple[str, ...] = SAFE_PREFIXES) -> None:
    """What a run that exists may change on resume: `safe`'s keys and a command's own."""
    if key == "resume" or key.split(".", 1)[0] in COMMAND_KEYS or key.startswith(safe):
        return
    allowed = ", ".join(f"{s}*" if s.endswith(".") else s for s in safe)
    raise ConfigError(f"config key `{key}` cannot change for a run that exists (its config is the one it "
                      f"was trained with); only {allowed} may. Start a new run for other settings.")


def _overwrite(argv: list[str]) -> bool:
    value = value_of(argv, "overwrite")
    if value not in (None, "true", "false", "True", "False"):
        raise config_error("overwrite", value, "true or false")
    return value in ("true", "True")


def _refuse_or_move_aside(folder: Path, overwrite: bool, key: str) -> None:
    """A new run (or sweep) into a folder chosen on the command line that holds a run already:
    refused, or with overwrite=true the old one renamed aside first; a live run is never moved."""
    if folder.exists() and not folder.is_dir():
        raise config_error(key, str(folder), f"a folder: {folder} is a file (nothing was written); name a new "
                           "folder, or one that holds no run")
    if not holds_run(folder):
        return
    if not overwrite:
        go_on = f"`python -m app train resume={folder}`" + ("" if key == "hydra.run.dir" else
                                                              " (every job of the sweep, each in its own folder)")
        files = run_files(folder) if key == "hydra.run.dir" else ["jobs' runs"]
        go_on = f"Continue it with {go_on}, choose" if "checkpoints" in files or key != "hydra.run.dir" else "Choose"
        raise config_error(key, str(folder), f"{folder} holds a run already (its {', '.join(files)}), which a new "
                           f"run would overwrite and mix with its own. {go_on} another folder, or add overwrite=true "
                           f"to rename it to {folder.name}.old (nothing is deleted) and start anew there")
    check_unlocked(folder)
    aside = move_aside(folder)
    print(f"overwrite=true: the run that was in {folder} moved to {aside}", file=sys.stderr)


def _slurm_tasks() -> int:
    return int(os.environ.get("SLURM_NTASKS", "1"))


def _process_of(argv: list[str]) -> int:
    """This process's id among the processes of one run, as the command line or SLURM say."""
    given = value_of(argv, "trainer.process_id")
    if given not in (None, "null"):
        return int(given)
    return int(os.environ.get("SLURM_PROCID", "0")) if _slurm_tasks() > 1 else 0


def latest_run(outputs: Path) -> Path:
    """The training run under `outputs` whose newest checkpoint is the newest of all."""
    states = list(Path(outputs).glob("**/checkpoints/step-*/state.json"))
    if not states:
        raise config_error("resume", "latest", f"no training run under {Path(outputs).resolve()} has a checkpoint")
    newest = max(states, key=lambda p: p.stat().st_mtime)
    return newest.parent.parent.parent.resolve()


def resumed_config(saved: dict, cfg: DictConfig, overrides: list[str],
                   safe: tuple[str, ...] = SAFE_PREFIXES) -> DictConfig:
    """The checkpoint's config, with the overrides that are safe applied; anything else is an error."""
    result = OmegaConf.create(migrated(saved))
    for override in overrides:
        key = key_of(override)
        if key == "logger" and _loggers(cfg) == _loggers(result):  # the run's own (`_loggers_of_run`)
            continue
        _check_safe(key, safe)
        if key == "resume" or key.split(".", 1)[0] in COMMAND_KEYS:  # the command's own (export.*): never the run's
            continue
        OmegaConf.update(result, key, OmegaConf.select(cfg, key), merge=False)
    result.resume = cfg.resume
    return result


def open_run(cfg: DictConfig, safe: tuple[str, ...]) -> tuple[Path, Config]:
    """`read_run_setting_backend`, then Keras loaded for it (`keras_for_run`)."""
    run_dir, config = read_run_setting_backend(cfg, safe)
    keras_for_run()
    return run_dir, config


def read_run_setting_backend(cfg: DictConfig, safe: tuple[str, ...],
                             backend: Backend | None = None) -> tuple[Path, Config]:
    """(run dir, its config with the `safe` overrides, loaded: re-typed by the schemas and
    validated), Keras set to load on the run's backend (or `backend`: export's TensorFlow) but
    not loaded: a command's own checks between this and `keras_for_run` refuse in a second,
    not after TensorFlow's start-up."""
    run_dir = Path(cfg.resume)
    cfg = resumed_config(checkpoint.saved_config(run_dir), cfg, list(HydraConfig.get().overrides.task), safe)
    config = load(cfg)
    # the run's backend: a run trained on JAX needs no TensorFlow here
    use_backend(config.trainer if backend is None else dataclasses.replace(config.trainer, backend=backend))
    return run_dir, config


def keras_for_run() -> None:
    """Keras loaded quietly on the backend `read_run_setting_backend` set (its native start-up lines go to the
    command's log): a command imports its Keras side (app/training/restore.py) after this, as
    a module that imports Keras at its top would load it loudly."""
    load_keras()
    query_devices_quietly()
