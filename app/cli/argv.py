"""The command line before Hydra: each command's directory, and `resume=<run dir>|latest`, resolved first: `train`
continues in the run (process 0 locking it); evaluate, predict, export write `<run dir>/<command>/<date>_<time>/`. A new
dir is claimed atomically (`<time>-1` on a clash) unless hydra.(run|sweep).dir is set; srun tasks share one."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from app.cli.keys import (
    ON_A_RUN,
    of_some_data_group,
    refuse_keys_of_other_commands,
    refuse_moved_keys,
    renamed_choosers,
)
from app.errors import ConfigError, config_error
from app.hydra_files import JOB_FILES, SWEEP_FILE
from app.io import is_linked, replace_link_by_copy
from app.overrides import key_of, quote_override, quoted, value_of
from app.runs import checkpoint, sweeps
from app.runs.rundir import (
    check_unlocked,
    claim_dir,
    hold_lock,
    holds_run,
    move_aside,
    refuse_linked_folders,
    run_files,
)
from app.runs.saved import check_safe, latest_run, loggers_of

# Hydra's flags that print or inspect instead of running: no directory is claimed for them.
INFO_FLAGS = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc")
# Directories claimed in this process: app/__main__.py removes those left empty (a config error
# that Hydra finds after the claim must not leave an empty run directory behind).
CLAIMED: list[Path] = []
LOG_FILE = "train.log"  # Hydra's job log in a run's folder (conf/common.yaml: <job name>.log)


def claim_and_rewrite_argv(argv: list[str], outputs: Path = Path("outputs"), *, word: str = "train") -> list[str]:
    """The overrides of `python -m app <word> ...`, rewritten as the module docstring says."""
    argv = [quote_override(a) for a in argv]  # first: each is then read as Hydra will read it
    refuse_moved_keys(argv)
    refuse_keys_of_other_commands(argv, word)
    argv = renamed_choosers(argv)
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
    # Composed on the default data group (synthetic: no table, patches, test_path or storage_options) before the run's
    # is read: any data option's key is added, so that the run's own config decides (`resumed_config`: changed where
    # a resume may change it, else "cannot change for a run that exists"), never "no such key".
    kept = [f"++{a.lstrip('+')}" if of_some_data_group(key_of(a)) and a[:1] != "~" else a for a in kept]
    kept += _loggers_of_run(run_dir, kept)
    if on_a_run:
        where = run_dir / word / f"{stamp[0]}_{stamp[1]}"
        if not info:
            CLAIMED.append(where := claim_dir(where))
    else:
        where = run_dir
        if not info and _process_of(argv) == 0:  # process 0 of a several-process run holds the lock
            hold_lock(run_dir, "python -m app train resume=...")
            replace_links_hydra_would_follow(run_dir, sweep=False)
    return [*kept, f"resume={quoted(str(run_dir))}", f"hydra.run.dir={quoted(str(where))}", "hydra.output_subdir=null"]


def _loggers_of_run(run_dir: Path, given: list[str]) -> list[str]:
    """`logger=[<the run's loggers>]` when a resume gives a `logger.*` key; refused for a logger the run lacks."""
    keys = [key_of(a) for a in given if key_of(a).startswith("logger.")]
    if not keys:
        return []
    loggers = loggers_of(checkpoint.saved_config(run_dir))
    for key in keys:
        check_safe(key)
        name = key.split(".")[1]
        if name not in loggers:
            raise ConfigError(f"config key `{key}` names a logger this run does not have (it logs to: "
                              f"{', '.join(loggers) or 'none'}); a run's loggers are the ones it was trained "
                              f"with. Leave `{key}` out, or start a new run with logger={name}.")
    return [f"logger=[{','.join(loggers)}]"]


def _sweep_resumed(sweep: Path, given: list[str], *, word: str, info: bool) -> list[str]:
    """`train resume=<sweep dir>`: the sweep's own command line again (app/runs/sweeps.py); other commands refused."""
    if word != "train":
        raise sweeps.not_a_run(sweep, word)
    if info:  # Hydra prints or inspects: nothing runs, nothing is checked
        return [*given, f"resume={quoted(str(sweep))}"]
    for arg in given:
        if not arg.startswith("-") and not key_of(arg).startswith(("hydra.", "hydra/")):
            check_safe(key_of(arg))
    sweeps.check_unlocked_sweep(sweep)
    resumed = sweeps.resume_argv(sweep, given)  # multirun.yaml read first: a link there is followed to read it
    replace_links_hydra_would_follow(sweep, sweep=True)
    return resumed


def replace_links_hydra_would_follow(folder: Path, *, sweep: bool) -> None:
    """Hydra's files in `folder` (.hydra/*.yaml, train.log; a sweep's multirun.yaml, its jobs'): links replaced."""
    # Hydra writes them with a plain open(), which follows a link, and opens train.log while configuring its logging,
    # where an error reads as a bug: as app/io.py does for the app's own files, before Hydra starts
    jobs = [job for job in folder.iterdir() if job.is_dir() and not job.is_symlink()] if sweep and folder.is_dir() \
        else []
    files = [folder / SWEEP_FILE] if sweep else []
    for each in [folder, *jobs]:
        refuse_linked_folders(each)
        files += [each / ".hydra" / name for name in JOB_FILES] + [each / LOG_FILE]
    for path in filter(is_linked, files):
        was = replace_link_by_copy(path)
        print(f"{path} was {was}: replaced by a copy of that file, which Hydra writes (the link's file is left as it "
              "was)", file=sys.stderr)


def _overwrite(argv: list[str]) -> bool:
    value = value_of(argv, "overwrite")
    if value not in (None, "true", "false", "True", "False"):
        raise config_error("overwrite", value, "true or false")
    return value in ("true", "True")


def _refuse_or_move_aside(folder: Path, overwrite: bool, key: str) -> None:
    """A new run or sweep's folder: refused if a file or holding a run; with `overwrite` a non-live run moved aside."""
    if folder.exists() and not folder.is_dir():
        raise config_error(key, str(folder), f"a folder: {folder} is a file (nothing was written); name a new "
                           "folder, or one that holds no run")
    if not holds_run(folder):
        replace_links_hydra_would_follow(folder, sweep=key == "hydra.sweep.dir")
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


