"""The run directory: claiming a new one, refusing or moving aside one that holds a run, its lock, its JSON files."""

from __future__ import annotations

import atexit
import fcntl
import itertools
import json
import logging
import os
import platform
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from app.errors import AppError, DataError
from app.frameworks import versions
from app.io import OwnFileHandler, write_json
from app.redact import redacted

LOCK_FILE = ".lock"
_held: dict[Path, int] = {}  # run directory → the descriptor whose flock this process holds
log = logging.getLogger("app.train")


class RunInUseError(AppError):
    """Another live process holds a run directory's lock."""


def claim_dir(path: Path) -> Path:
    """A new directory at `path`, else `path-1`, `path-2`, ...: mkdir is atomic, so two claims never share one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in itertools.count():
        candidate = path if n == 0 else path.with_name(f"{path.name}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise AssertionError("unreachable")


# what a run leaves that a second run in its folder would overwrite or mix with its own (a run
# writes summary.json first, before its events, samples.csv or any checkpoint)
# What makes a folder hold a run worth keeping: a run that stopped before its first checkpoint
# or epoch (a refused config, say) leaves nothing a resume could go on from, and may be started anew.
RUN_FILES = ("metrics.csv", "model.keras")


def holds_run(path: Path) -> bool:
    """Whether `path` holds a run (finished, failed or stopped), or is a sweep's folder whose jobs do."""
    path = Path(path)
    return path.is_dir() and (_own_run(path) or any(_own_run(job) for job in path.iterdir() if job.is_dir()))


def _own_run(path: Path) -> bool:
    return bool(run_files(path))


def run_files(path: Path) -> list[str]:
    """The files of a run worth keeping in `path`: its checkpoints, metrics.csv, model.keras."""
    found = ["checkpoints"] if any((Path(path) / "checkpoints").glob("step-*")) else []
    return found + [name for name in RUN_FILES if (Path(path) / name).exists()]


# What a run records step by step before its first checkpoint: in a folder that holds no run
# (`holds_run`), these are a stopped run's leftovers, which a new run would append its steps to.
PARTIAL_RECORDS = ("samples.csv", "scalars.csv", "bad_samples.txt", "tensorboard")


# The folders of a run whose contents the app deletes and rewrites (Hydra writes .hydra/): a symbolic link there would
# have them land in, or be deleted from, the link's target.
OWN_FOLDERS = ("checkpoints", "tensorboard", ".hydra")


def refuse_linked_folders(run_dir: Path) -> None:
    """A DataError naming the first of OWN_FOLDERS (or tensorboard/'s folders) in `run_dir` that is a symbolic link."""
    boards = Path(run_dir) / "tensorboard"
    inside = sorted(f"tensorboard/{p.name}" for p in boards.iterdir() if p.is_dir()) if boards.is_dir() and not \
        boards.is_symlink() else []
    for name in (*OWN_FOLDERS, *inside):
        folder = Path(run_dir) / name
        if folder.is_symlink():
            target, quoted = Path(os.path.realpath(folder)), shlex.quote(str(folder))
            keep = f"put the folder itself in the link's place, which keeps the run whole: rm {quoted} && mv " \
                   f"{shlex.quote(str(target))} {quoted}" if target.is_dir() else "remove the link (it leads nowhere)"
            raise DataError(f"{folder} is a symbolic link (to {os.readlink(folder)}): a run writes and deletes files "
                            f"in its {name}/ folder, which must be the run's own, never a link's target. Nothing was "
                            f"written. To go on, {keep}, then run the command again.")


def delete_partial_records(path: Path) -> None:
    """Deletes PARTIAL_RECORDS from `path` so a new run's steps start at 1; a folder that holds a run is left alone."""
    path = Path(path)
    if holds_run(path):
        return
    refuse_linked_folders(path)
    for name in PARTIAL_RECORDS:
        leftover = path / name
        if leftover.is_dir():
            shutil.rmtree(leftover)
        elif leftover.exists():
            leftover.unlink()
        else:
            continue
        log.info("removed %s: a run stopped in %s before its first checkpoint left it", leftover, path)


def move_aside(path: Path) -> Path:
    """Renames `path` to a free `<name>.old`, `<name>.old-1`, ... beside it and returns that; nothing is deleted."""
    path = Path(path)
    for n in itertools.count():
        aside = path.with_name(f"{path.name}.old" if n == 0 else f"{path.name}.old-{n}")
        if not aside.exists():
            path.rename(aside)
            return aside
    raise AssertionError("unreachable")


def hold_lock(run_dir: Path, command: str) -> None:
    """Flock `run_dir`/.lock (PID, `command`) till exit or `release_lock`; no-op if ours; RunInUseError if another's."""
    run_dir = Path(run_dir).resolve()
    if run_dir in _held:
        return
    refuse_linked_folders(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if (run_dir / LOCK_FILE).is_symlink():  # its PID is written there: never into a link's target
        raise DataError(f"{run_dir / LOCK_FILE} is a symbolic link: a run's lock file is its own. Nothing was "
                        "written. Remove the link, then run the command again.")
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        error = _in_use(run_dir, fd)
        os.close(fd)
        raise error from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n{command}\n".encode(), 0)
    _held[run_dir] = fd
    atexit.register(release_lock, run_dir)  # a command refused after it took the lock wipes its PID too


def release_lock(run_dir: Path) -> None:
    """Drops the lock and wipes our PID, leaving .lock as it was after the last run that ended; a no-op if not held."""
    fd = _held.pop(Path(run_dir).resolve(), None)
    if fd is not None:
        os.ftruncate(fd, 0)
        os.close(fd)  # closing the descriptor drops the flock


def _in_use(run_dir: Path, fd: int) -> RunInUseError:
    """The error for `run_dir`, whose lock file `fd` is open and held by another process."""
    holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").split("\n", 1)
    who = f"process {holder[0]} ({holder[1].strip()})" if len(holder) == 2 and holder[0].isdigit() \
        else "another process"
    return RunInUseError(
        f"{run_dir} is in use: {who} holds its lock ({run_dir / LOCK_FILE}). Two processes training one "
        "run would write its epochs and checkpoints twice. Wait for it to end, or stop it (kill "
        f"{holder[0] if holder[0].isdigit() else '<pid>'}) and resume; a process that died leaves no lock.")


def check_unlocked(run_dir: Path) -> None:
    """RunInUseError when a live process holds `run_dir`'s lock; .lock is only read (its bytes and times kept)."""
    run_dir = Path(run_dir).resolve()
    if run_dir in _held or not (run_dir / LOCK_FILE).is_file():
        return
    fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken and dropped at once, or held by another
    except BlockingIOError:
        raise _in_use(run_dir, fd) from None
    finally:
        os.close(fd)


def log_apart(run_dir: Path, process: int) -> None:
    """Moves this process's file logging to `train.<process>.log` in `run_dir`, apart from process 0's log."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()
        apart = OwnFileHandler(Path(run_dir) / f"train.{process}.log")
        apart.setFormatter(handler.formatter)
        apart.setLevel(handler.level)
        root.addHandler(apart)


class Summary:
    """summary.json, rewritten at start, each epoch and the end; a resumed run's only once `start` is called."""

    def __init__(self, run_dir: Path, overrides: list[str], *, resumed_from: str | None = None,
                 name: str = "summary.json"):
        self.path = Path(run_dir) / name
        self.started = True
        overrides = redacted(list(overrides))
        self.content: dict[str, Any] = {
            "status": "running", "epochs_completed": 0, "steps": 0, "loss": None, "val_accuracy": None,
            "images_per_s": None, "data_wait_fraction": None, "peak_memory_mb": None, "queue_bytes": None,
            "overrides": list(overrides), "started_at": _now(), "updated_at": _now(),
            "versions": versions(), "hardware": hardware(), "git_commit": git_commit(),
        }
        if resumed_from and self.path.exists():  # the same run goes on: keep its record
            self.content = read_summary(self.path, self.content)
            self.content.setdefault("resumed", []).append({"from": resumed_from, "at": _now(),
                                                           "overrides": list(overrides)})
            self.started = False
            self.update(status="running", message=None)
            return
        self.write()

    def update(self, **values: Any) -> None:
        self.content.update(values, updated_at=_now())
        if self.started:
            self.write()

    def start(self) -> None:
        """Training begins: from now on every update is written."""
        self.started = True
        self.write()

    def write(self) -> None:
        write_json(self.path, self.content)


def monitored(summary: dict) -> tuple[str, float | None]:
    """(trainer.monitor, its last value) of a summary.json: what judges a run; val_accuracy where it names none."""
    name = (summary.get("best") or {}).get("monitor") or "val_accuracy"
    return name, summary.get(name)


def monitor_mode(monitor: str, setting: str = "auto") -> str:
    """min or max: trainer.monitor_mode's `setting`, `auto` being min for a loss and max otherwise."""
    if setting == "auto":
        return "min" if monitor.endswith("loss") else "max"
    return setting


def better_is_higher(summary: dict) -> bool:
    """Whether a higher value of the run's monitor is better: its recorded mode, else (an older summary) `auto`'s."""
    return ((summary.get("best") or {}).get("mode") or monitor_mode(monitored(summary)[0])) == "max"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def hardware(gpus: list[str] | None = None) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "gpus": gpus or [], "platform": platform.platform()}


def git_commit() -> str | None:
    """The project's commit when the app runs from a git checkout."""
    source = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def read_summary(path: Path, fresh: dict) -> dict:
    """A run's summary.json, checked (a DataError naming it), each key it lacks taken from `fresh` and logged."""
    what_to_do = ("delete it and resume again to start a new one (metrics.csv and the checkpoints keep the run's "
                  "history)")
    content = read_json(path, what_to_do)
    if not isinstance(content, dict):
        raise DataError(f"{path} holds {type(content).__name__} where a run's summary is a JSON object: {what_to_do}.")
    missing = [key for key in fresh if key not in content]
    if missing:
        log.warning("%s lacks %s: rebuilt as of this resume (metrics.csv and the checkpoints keep the run's history)",
                    path, ", ".join(missing))
    return {**fresh, **content, "versions": fresh["versions"], "git_commit": fresh["git_commit"]}


def read_json(path: Path, what_to_do: str) -> Any:
    """A run's JSON file; a missing or corrupt one is a DataError naming it and what to do."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path} is missing: {what_to_do}.") from None
    except (OSError, ValueError) as error:
        raise DataError(f"{path} cannot be read ({error}): {what_to_do}.") from None
