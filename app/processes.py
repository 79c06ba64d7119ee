"""Processes: starting children from wherever the app runs (a launcher's worker included),
making them end with their parent, keeping the memory they free, and how the training process
takes Ctrl-C and SIGTERM, and what a crash inside a C library leaves on the terminal. No
TensorFlow: worker processes import this."""

from __future__ import annotations

import ctypes
import faulthandler
import multiprocessing as mp
import os
import signal
import sys
from contextlib import contextmanager


@contextmanager
def startable(start_method: str):
    """Inside a launcher's own worker (joblib's loky) the process-wide start method is one a
    spawned child cannot set up, and it travels in the child's start-up data: `start_method`
    stands in for it while a child starts."""
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
    """While a child starts: spawn has each child import the parent's main module (so what it
    defines unpickles there), and a user's script that imports Keras at its top would load
    TensorFlow into every worker. `hidden`: the child is not told of it (nothing sent refers to it)."""
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
    """Ask Linux to SIGKILL this process when its parent dies, even by SIGKILL. (Under
    forkserver the parent is the fork server, which exits when the training process does.)"""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for the next allocation instead of handing it back to the kernel.

    A worker allocates the same few large buffers for every sample (Pillow's decoded image, its
    array, the augmented copies). By default glibc serves each from fresh mmap'ed or trimmed
    pages, so every sample page-faults its megabytes in again, which in a VM can cost more than
    the JPEG decode itself (docs/performance.md has the figures).
    Kept, the heap stays at the size of the largest sample. False where this is not glibc.
    """
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
    """A segfault (or abort) inside TensorFlow, JAX or another C library prints every Python
    thread's stack to stderr before the process dies (Python's faulthandler): what the process was
    doing, for the report, where the process would otherwise end with no word."""
    for stream in (sys.stderr, sys.__stderr__):  # a stand-in stderr (a notebook's, a test's) has no file
        if faulthandler.is_enabled():
            return
        try:
            faulthandler.enable(stream, all_threads=True)
        except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation: no fileno; None
            continue


def stop_if_interrupted() -> None:
    """Raise the KeyboardInterrupt of a Ctrl-C or SIGTERM that came, should its first raise have
    been lost: Python ignores an exception raised inside a garbage-collector callback or a
    `__del__` ("Exception ignored in …"), and the run would train on. The step loops, evaluate's
    and predict's batch loops and the end of every command call this."""
    if _held["requested"] and not _held["depth"]:
        raise KeyboardInterrupt


def raise_on_stop_signals() -> None:
    """From a command's first moment, Ctrl-C and a scheduler's SIGTERM raise KeyboardInterrupt
    and are remembered, so that one whose raise was lost still stops the command at its next
    `stop_if_interrupted` (a training run's own handling takes over once it starts: `interrupts`)."""
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
    """Ctrl-C and SIGTERM wait for the block's end, then stop the command as usual. For what must
    be written together (an epoch's metrics row, model.keras and checkpoint: a signal between them
    would leave a row that no checkpoint backs), and for TensorFlow's tracing, whose C++ callbacks
    cannot take an exception raised inside them."""
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
    """Ctrl-C (SIGINT) and a scheduler's SIGTERM end the run the same way: the first raises
    KeyboardInterrupt (workers stopped, status `interrupted`); any more while it stops are
    ignored for the rest of the process, so a second Ctrl-C cannot cut the clean-up short (a
    traceback, a ring left for the resource tracker)."""
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
