"""Processes: worker counts, children started anywhere and dying with their parent, signals, C crash reports."""

from __future__ import annotations

import ctypes
import faulthandler
import multiprocessing as mp
import os
import signal
import sys
from contextlib import contextmanager
from multiprocessing import forkserver

import psutil

WORKER_MIB = 100  # what a worker process costs, about (numpy, Pillow, OpenCV, albumentations, its buffers)
WORKERS_PER_CORE = 4


def worker_limit() -> tuple[int, str]:
    """The most loader worker processes this machine holds, and how that was found."""
    cores = os.cpu_count() or 1
    available = psutil.virtual_memory().available
    by_memory = max(1, int(available // (WORKER_MIB * 2**20)))
    # only the bound that binds is named: a refusal over memory gives the memory plan's measured figure
    if WORKERS_PER_CORE * cores <= by_memory:
        return WORKERS_PER_CORE * cores, f"{WORKERS_PER_CORE} a core × {cores} cores"
    return by_memory, f"{available / 2**30:.1f} GiB available / ~{WORKER_MIB} MiB a worker"


@contextmanager
def startable(start_method: str):
    """While a child starts, `start_method` replaces a foreign process-wide start method (joblib's loky's)."""
    method = mp.get_start_method(allow_none=True)
    foreign = method not in (None, *mp.get_all_start_methods())
    if foreign:
        mp.set_start_method(start_method, force=True)
    try:
        yield
    finally:
        if foreign:
            mp.set_start_method(method, force=True)


@contextmanager
def main_module_hidden(hidden: bool):
    """With `hidden`, spawn is not told the main module: a user script's Keras import loads no TensorFlow in workers."""
    main = sys.modules.get("__main__")
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if main and name in main.__dict__}
    if hidden and saved:
        main.__spec__ = None  # multiprocessing.spawn.get_preparation_data reads these two
        main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        if hidden and saved:
            main.__dict__.update(saved)


def die_with_parent(parent_pid: int | None) -> None:
    """SIGKILL this process when its parent dies (under forkserver: the fork server); exit now if it is already gone."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:  # the parent died before prctl took effect
        sys.stderr.write(f"process {os.getpid()}: its parent, process {parent_pid}, ended before it started\n")
        os._exit(1)


# In a child of the fork server: let go of the pipe whose end tells the server its clients are gone, which
# multiprocessing hands each child it forks. A worker hung in C code held it, so the server (the worker's PDEATHSIG
# parent) outlived a killed training process. A private attribute (the same in Python 3.11-3.14), here alone:
# tests/loader/test_pool.py kills the parent of spinning workers; pyproject.toml pins the Python minor.
def close_fork_server_alive_pipe() -> None:
    server = getattr(forkserver, "_forkserver", None)
    if getattr(server, "_forkserver_alive_fd", None) is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None


# multiprocessing's fork server, started where none runs (with the preload set before), and its pid: multiprocessing's
# own record of the process that forks the workers, their parent. A private attribute (the same in Python 3.11-3.14),
# here alone: tests/loader/test_pool.py finds that process a fork server and its workers' parent.
def start_fork_server() -> int:
    forkserver.ensure_running()
    return fork_server_pid()


def fork_server_pid() -> int | None:  # the one multiprocessing last started here; None where the attribute moved
    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
    """Keep freed memory in glibc so a worker's big buffers are not page-faulted each sample; False where not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


# `signals_held` blocks open in this process, whether a signal came during one, and whether one
# came at all (its KeyboardInterrupt may have been lost: see `stop_if_interrupted`)
_held = {"depth": 0, "pending": False, "requested": False}


def enable_crash_report() -> None:
    """On a segfault or abort inside a C library, print every Python thread's stack to stderr (faulthandler)."""
    for stream in (sys.stderr, sys.__stderr__):  # a stand-in stderr (a notebook's, a test's) has no file
        if faulthandler.is_enabled():
            return
        try:
            faulthandler.enable(stream, all_threads=True)
        except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation: no fileno; None
            continue


def stop_if_interrupted() -> None:
    """Raise a stop whose KeyboardInterrupt was lost (raised in a GC callback or `__del__`); called at safe points."""
    if _held["requested"] and not _held["depth"]:
        raise KeyboardInterrupt


def raise_on_stop_signals() -> None:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt, noted for `stop_if_interrupted`, until training's `interrupts`."""
    def interrupt(signum, frame):
        _held["requested"] = True
        if _held["depth"]:  # raised when the held block ends
            _held["pending"] = True
            return
        raise KeyboardInterrupt

    _held["requested"] = False
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupt)


@contextmanager
def signals_held():
    """Ctrl-C/SIGTERM wait for the block's end: for writes that belong together and TF tracing (its C++ can't raise)."""
    _held["depth"] += 1
    try:
        yield
    finally:
        _held["depth"] -= 1
    if _held["pending"] and not _held["depth"]:
        _held["pending"] = False
        raise KeyboardInterrupt


@contextmanager
def interrupts():
    """The first Ctrl-C/SIGTERM raises KeyboardInterrupt; later ones are ignored for good, not to cut clean-up short."""
    def stopping(signum, frame):
        print("stopping: the workers are being ended and the run recorded; one moment.", file=sys.stderr)

    def interrupt(signum, frame):
        _held["requested"] = True
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stopping)
        if _held["depth"]:  # raised when the held block ends
            _held["pending"] = True
            return
        raise KeyboardInterrupt

    try:  # a stop that came before, its raise lost, stays requested
        previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread (a threaded launcher): leave the signals alone
        yield
        return
    stopped = False
    try:
        yield
    except KeyboardInterrupt:
        stopped = True
        raise
    finally:
        _held["requested"] = False  # stopped by now, or never asked: nothing left for the step loops to raise
        for sig, handler in previous.items():  # after an interrupt the process is ending: ignore the rest
            signal.signal(sig, signal.SIG_IGN if stopped else handler)


def delete_orphan_semaphores(shm: str = "/dev/shm") -> list[str]:
    """This user's `sem.mp-*` that no process maps: a pool's, whose group's SIGKILL killed the resource tracker too."""
    mapped = set()  # by inode: the process that made a semaphore maps it under glibc's temporary name, since unlinked
    for pid in psutil.pids():
        try:
            with open(f"/proc/{pid}/maps") as maps:
                mapped.update(int(line.split()[4]) for line in maps if f" {shm}/sem." in line)
        except (OSError, ValueError, IndexError):  # gone, or another user's: its semaphores are not ours to delete
            continue
    deleted = []
    for name in os.listdir(shm) if os.path.isdir(shm) else ():
        path = os.path.join(shm, name)
        try:
            found = os.stat(path)
            if name.startswith("sem.mp-") and found.st_ino not in mapped and found.st_uid == os.getuid():
                os.unlink(path)
                deleted.append(name)
        except OSError:
            continue
    return deleted
