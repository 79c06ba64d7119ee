"""A sweep finished in its own folder (`train resume=<sweep dir>`); a resumed job's `.hydra/` kept as first written."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from app.errors import AppError, ConfigError, DataError, config_error
from app.io import atomic_write
from app.overrides import as_dict, key_of, quoted
from app.redact import redacted
from app.runs import checkpoint
from app.runs.rundir import LOCK_FILE, check_unlocked, hold_lock, monitored, release_lock, run_files

RECORD = "multirun.yaml"  # what Hydra saves in a sweep's folder before its first job
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
CALLBACK = "sweep"  # hydra.callbacks.<CALLBACK> in conf/config.yaml: SweepLock
RESOLVER = "app.unless_resumed"
# Hydra's keys that decide which job is which and where it writes: a resume takes the sweep's or sets them
MAPPING = ("hydra.sweep", "hydra.sweeper", "hydra/sweeper", "hydra.mode", "hydra.output_subdir", "hydra.callbacks",
           "hydra/callbacks")
# those a resume sets itself, in place of the sweep's
REPLACED = ("hydra.mode", "hydra.sweep.dir", "hydra.output_subdir", f"hydra.callbacks.{CALLBACK}.")


def is_sweep(path: Path) -> bool:
    """Whether `path` is a sweep's folder (Hydra's multirun.yaml in it), not a run's."""
    return (Path(path) / RECORD).is_file()


def not_a_run(sweep: Path, word: str) -> ConfigError:
    """`evaluate`/`predict` given a sweep's folder: the error names a job's folder to give instead."""
    jobs = sorted((p for p in Path(sweep).iterdir() if (p / "checkpoints").is_dir()), key=job_order)
    example = jobs[0] if jobs else Path(sweep) / "0"
    names = ", ".join(p.name for p in jobs) or "none with a checkpoint yet"
    return config_error("resume", str(sweep), f"a run's folder: {sweep} is a sweep's (its jobs: {names}), and "
                        f"`{word}` works on one run. Give a job's folder, e.g. python -m app {word} resume={example}")


def job_order(path: Path) -> tuple:
    """A sort key: job 2 before job 10; a folder named otherwise beside them (a copy, notes) after them."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in Path(path).parts)


def recorded(sweep: Path) -> tuple[list[str], list[str], str]:
    """(task overrides, Hydra's overrides, the sweeper's `_target_`) as the sweep's multirun.yaml holds them."""
    path = Path(sweep) / RECORD
    try:
        saved = OmegaConf.load(path)
        task, own = (OmegaConf.select(saved, f"hydra.overrides.{k}") for k in ("task", "hydra"))
        sweeper = OmegaConf.select(saved, "hydra.sweeper._target_")
        task, own = OmegaConf.to_container(task), OmegaConf.to_container(own)
    except Exception as error:  # noqa: BLE001 - YAML's, OmegaConf's or the disk's: the file cannot serve
        problem = str(error).splitlines()[0] if str(error) else type(error).__name__
    else:
        if isinstance(task, list) and isinstance(own, list) and isinstance(sweeper, str):
            return [str(a) for a in task], [str(a) for a in own], sweeper
        problem = "it holds no hydra.overrides.task, hydra.overrides.hydra or hydra.sweeper._target_"
    raise DataError(f"{path} cannot be read ({problem}): it is Hydra's record of the command that started the sweep, "
                    f"which `resume` runs again. Restore it from a copy, or resume each job alone with "
                    f"python -m app train resume={sweep}/<job>.")


def resume_argv(sweep: Path, given: list[str]) -> list[str]:
    """The sweep's own command line again, `given` (checked safe) replacing or joining its overrides, same folder."""
    # a ConfigError for a sweep another sweeper than the basic one ran
    task, own, sweeper = recorded(sweep)
    if sweeper != BASIC_SWEEPER:
        name = sweeper.rsplit(".", 1)[-1]
        raise config_error("resume", str(sweep), f"a sweep run by Hydra's basic sweeper: {sweep} was run by {name}, "
                           "which picks each job's settings from the results of the jobs before it, so run again it "
                           "would not give each job the settings its folder holds. Resume a job that stopped alone "
                           f"with python -m app train resume={sweep}/<job>, and start the search again (in a new "
                           "folder) for the trials it did not run")
    flags = [a for a in given if a.startswith("-") and a not in ("-m", "--multirun")]
    added = [a for a in given if not a.startswith("-") and not _is_hydra(a)]
    hydra_given = [a for a in given if not a.startswith("-") and _is_hydra(a)]
    _check_added(added, hydra_given, task)
    replaced = {key_of(a): a for a in added}
    task = [replaced.get(key_of(a), a) for a in task] + [a for a in added if key_of(a) not in map(key_of, task)]
    mine = {key_of(a) for a in hydra_given}
    kept = [a for a in own if not key_of(a).startswith(REPLACED) and key_of(a) not in mine]
    subdir = next((a.split("=", 1)[1] for a in own if key_of(a) == "hydra.output_subdir"), ".hydra")
    if subdir not in ("null", "None") and not subdir.startswith("${"):
        subdir = f"${{{RESOLVER}:{subdir}}}"
    print(f"resuming the sweep in {sweep}: {' '.join(redacted(task))}", file=sys.stderr)
    return ["-m", *flags, *task, *kept, *hydra_given, f"hydra.sweep.dir={quoted(str(sweep))}",
            f"hydra.output_subdir={subdir}", f"hydra.callbacks.{CALLBACK}.resuming=true"]


def _is_hydra(arg: str) -> bool:
    return key_of(arg).startswith(("hydra.", "hydra/"))


def _check_added(added: list[str], hydra_given: list[str], task: list[str]) -> None:
    """What a sweep's resume may add: no sweep of its own, no swept key, nothing of the sweep's mapping."""
    for arg in hydra_given:
        if key_of(arg).startswith(MAPPING):
            raise config_error(key_of(arg), arg.split("=", 1)[-1], "left out of a sweep's resume: the sweep's "
                               "folder and sweeper decide which job is which, and each job's folder holds its run "
                               "(the launcher's own keys, hydra.launcher.*, may change)")
    parser = OverridesParser.create()
    swept = {o.key_or_group: o.input_line for o in parser.parse_overrides(task) if o.is_sweep_override()}
    for override in parser.parse_overrides(added):
        key = override.key_or_group
        if key in swept:
            raise config_error(key, override.input_line.split("=", 1)[1], f"left out of this resume: the sweep "
                               f"gives each job its own ({swept[key]}), and a job keeps the settings it was started "
                               "with")
        if override.is_sweep_override():
            raise config_error(key, override.input_line.split("=", 1)[1], "one value, which a resume gives every "
                               "job, not a sweep of its own: the resume runs the sweep it finishes, no other")


def check_unlocked_sweep(sweep: Path) -> None:
    """RunInUseError when a live process holds the sweep's lock or any of its jobs' (a job resumed alone)."""
    check_unlocked(sweep)
    for job in sorted(p for p in Path(sweep).iterdir() if (p / LOCK_FILE).is_file()):
        check_unlocked(job)


@dataclass(frozen=True)
class Step:
    """A resumed sweep job's step: `done` (+ `monitored`), `resume` with changeable `overrides`, or `start` with all."""

    action: str
    overrides: list[str] = field(default_factory=list)
    monitored: tuple[str, float | None] = ("val_accuracy", None)


def resuming(hydra_cfg: DictConfig) -> bool:
    """Whether this job's sweep is a resume (`train resume=<sweep dir>`)."""
    return bool(OmegaConf.select(hydra_cfg, f"callbacks.{CALLBACK}.resuming", default=False))


def job_step(run_dir: Path, overrides: list[str], *, epochs: int, safe: tuple[str, ...]) -> Step:
    """The `Step` of sweep job `run_dir` (`safe`: keys a resume may change); a ConfigError when it holds another run."""
    run_dir = Path(run_dir)
    if not run_files(run_dir):  # never started, or stopped before its first checkpoint and epoch
        return Step("start", list(overrides))
    summary = _summary(run_dir)
    before = summary.get("overrides")
    if isinstance(before, list) and _fixed(before, safe) != _fixed(overrides, safe):
        raise config_error("resume", str(run_dir.parent), f"a sweep whose jobs hold the runs they were given: "
                           f"{run_dir} holds a run of {' '.join(map(str, before))}, where job {run_dir.name} of "
                           f"this sweep is {' '.join(overrides)} (the config files changed since?). Resume that run "
                           f"alone with python -m app train resume={run_dir}, or start the sweep in a new folder")
    set_before = _epochs_set(run_dir)
    if summary.get("status") == "completed" and (set_before is None or epochs <= set_before):
        return Step("done", monitored=monitored(summary))
    if not (run_dir / "checkpoints").is_dir():
        raise checkpoint.nothing_to_resume(run_dir)
    return Step("resume", [a for a in overrides if key_of(a).startswith(safe)])


def _fixed(overrides: list[str], safe: tuple[str, ...]) -> dict[str, str]:
    """What a run cannot change once it exists: its overrides but those a resume may give."""
    return {key: value for key, value in as_dict(overrides).items() if not key.startswith(safe)}


def _epochs_set(run_dir: Path) -> int | None:
    """trainer.epochs as the run's newest checkpoint holds it; None when no checkpoint says."""
    try:
        return int(checkpoint.saved_config(run_dir)["trainer"]["epochs"])
    except (AppError, KeyError, TypeError, ValueError):
        return None


def _summary(run_dir: Path) -> dict:
    """The job's summary.json, or {} when it is missing or unreadable (its checkpoints decide then)."""
    try:
        content = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


class SweepLock(Callback):
    """Hydra's callback: the sweep holds its `.lock` while it runs; writes multirun.yaml where its sweeper does not."""

    def __init__(self, resuming: bool = False) -> None:
        self.resuming = resuming

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        command = "python -m app train resume=<sweep dir>" if self.resuming else "python -m app train -m"
        hold_lock(Path(str(config.hydra.sweep.dir)), command)
        write_record_for_other_sweepers(config)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        release_lock(Path(str(config.hydra.sweep.dir)))


def write_record_for_other_sweepers(config: DictConfig) -> None:
    """Writes the sweep's multirun.yaml, redacted, where its sweeper saves none: `resume=` and MLflow look for it."""
    if OmegaConf.select(config, "hydra.sweeper._target_") == BASIC_SWEEPER:
        return
    with atomic_write(Path(str(config.hydra.sweep.dir)) / RECORD, encoding="utf-8") as f:
        f.write(OmegaConf.to_yaml(OmegaConf.create(redacted(OmegaConf.to_container(config)))))


def _unless_resumed(subdir: str, _root_: DictConfig) -> str | None:
    """The resolver for a resumed sweep job's `hydra.output_subdir`: None when its folder holds a run, else `subdir`."""
    folder = OmegaConf.select(_root_, "hydra.runtime.output_dir", default=None)
    return subdir if folder is None or not run_files(Path(folder)) else None


OmegaConf.register_new_resolver(RESOLVER, _unless_resumed, use_cache=False, replace=True)
