"""app/processes.py: what worker processes do to themselves, and the semaphores a killed pool leaves."""

from __future__ import annotations

import multiprocessing
import os
import platform
import shutil
import signal
import subprocess
import sys

import pytest

from app.processes import delete_orphan_semaphores

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")

# Frees a touched 64 MiB block (above glibc's largest mmap threshold) and prints how much of
# it went back to the kernel.
FREE_A_BLOCK = """
import os, sys
from app.processes import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory() is True

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

block = bytearray(64 * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
before = rss()
del block
print(before - rss())
"""


def _returned_bytes(how: str) -> int:
    result = subprocess.run([sys.executable, "-c", FREE_A_BLOCK, how], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def test_freed_memory_is_kept_for_the_next_sample():
    assert _returned_bytes("keep") < 4 * 2**20
    # negative control: by default glibc hands such a block straight back (and faults it in again next time)
    assert _returned_bytes("default") > 60 * 2**20


def test_a_signal_inside_a_held_block_stops_the_run_when_the_block_ends():
    """What an epoch writes together (its metrics row, model.keras, checkpoint) is not cut by
    SIGTERM or Ctrl-C: the signal stops the run once the block is done."""
    import os
    import signal

    from app.processes import interrupts, signals_held

    done = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(KeyboardInterrupt), interrupts():
            with signals_held():
                os.kill(os.getpid(), signal.SIGTERM)
                done.append("after the signal")  # the block goes on
            done.append("after the block")  # never reached
        assert done == ["after the signal"]
        done.clear()
        with pytest.raises(KeyboardInterrupt), interrupts():  # negative control: outside a held block, at once
            os.kill(os.getpid(), signal.SIGTERM)
            done.append("after the signal")
        assert done == []
    finally:  # interrupts() leaves them ignored: the process was ending
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_interrupt_lost_inside_a_gc_callback_still_stops_the_run():
    """Python ignores a KeyboardInterrupt raised inside a garbage-collector callback (JAX and
    TensorFlow register some): the step loops' check raises it again."""
    import gc
    import os
    import signal

    from app.processes import interrupts, stop_if_interrupted

    def signalled_during_collection(phase, info):
        if phase == "start":
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # bytecode, where the handler runs and its raise is lost

    reached = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with interrupts():
            stop_if_interrupted()  # negative control: no signal yet, nothing raised
        with pytest.raises(KeyboardInterrupt), interrupts():
            gc.callbacks.append(signalled_during_collection)
            try:
                gc.collect()
            finally:
                gc.callbacks.remove(signalled_during_collection)
            reached.append("the interrupt was lost")
            stop_if_interrupted()
            reached.append("trained on")
        assert reached == ["the interrupt was lost"]
        stop_if_interrupted()  # once the block is left, later work in the process is not stopped
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_stop_lost_before_training_starts_still_stops_it():
    """A command's stop signals are remembered from its first moment: one whose raise was lost
    while the command started (evaluate's model loading, say) stops it at the next check, and
    the training run's own handling does not forget it."""
    import os
    import signal

    from app.processes import interrupts, raise_on_stop_signals, stop_if_interrupted

    class Finalised:
        def __del__(self):  # where Python ignores what a signal handler raises
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(1000))

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        raise_on_stop_signals()
        stop_if_interrupted()  # negative control: no signal yet, nothing raised
        Finalised()  # collected at once: the signal comes, its raise is lost
        with pytest.raises(KeyboardInterrupt), interrupts():
            stop_if_interrupted()
        raise_on_stop_signals()  # the next command in this process starts afresh
        stop_if_interrupted()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_a_crash_inside_a_c_library_prints_every_threads_stack(tmp_path):
    """A segfault after a command ran (as inside TensorFlow): Python's stack of each thread on
    stderr, not a silent death."""
    crash = ("import ctypes, sys, threading\n"
             "threading.Thread(target=threading.Event().wait, name='app-prefetch', daemon=True).start()\n"
             "{run}\n"
             "ctypes.string_at(0)\n")
    run = "import app.__main__ as m; sys.argv = ['app', 'train', '--cfg', 'job']; m.main()"
    crashed = subprocess.run([sys.executable, "-c", crash.format(run=run)], capture_output=True, text=True,
                             cwd=tmp_path, timeout=120)
    assert crashed.returncode == -signal.SIGSEGV and "Fatal Python error: Segmentation fault" in crashed.stderr
    assert "Current thread 0x" in crashed.stderr and "\nThread 0x" in crashed.stderr  # the other thread's too
    silent = subprocess.run([sys.executable, "-c", crash.format(run="pass")], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120)
    assert silent.returncode == -signal.SIGSEGV and "Fatal Python error" not in silent.stderr  # negative control


HELD_FROM_THE_START = """
import os, signal, sys
from app.processes import raise_on_stop_signals, signals_held
raise_on_stop_signals()
try:
    if sys.argv[1] == "held":
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            print("the held block ended", flush=True)
    else:
        os.kill(os.getpid(), signal.SIGTERM)
        print("the held block ended", flush=True)
except KeyboardInterrupt:
    print("stopped", flush=True)
"""


def test_a_signal_before_training_starts_waits_for_a_held_block_too():
    """From a command's first moment (evaluate, predict, training's start), a stop inside a held
    block (TensorFlow tracing) is raised when the block ends, not inside it."""
    held = subprocess.run([sys.executable, "-c", HELD_FROM_THE_START, "held"], capture_output=True, text=True,
                          timeout=60)
    assert held.stdout.split() == ["the", "held", "block", "ended", "stopped"], held.stderr
    at_once = subprocess.run([sys.executable, "-c", HELD_FROM_THE_START, "free"], capture_output=True, text=True,
                             timeout=60)
    assert at_once.stdout.split() == ["stopped"], at_once.stderr  # negative control: not held, raised at once


def test_a_stand_in_stderr_still_gets_the_crash_report():
    """A notebook's or a test's stderr has no file: the report goes to the process's own stderr."""
    code = ("import faulthandler, io, sys\nfrom app.processes import enable_crash_report\n"
            "sys.stderr = io.StringIO()\ntry:\n    faulthandler.enable(sys.stderr)\n"
            "except io.UnsupportedOperation:\n    print('refused', end=' ')\n"  # negative control: faulthandler's own
            "enable_crash_report()\nprint(faulthandler.is_enabled())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["refused", "True"], done.stderr


def test_a_semaphore_its_maker_holds_is_never_deleted_as_an_orphan():
    """The maker maps a semaphore under glibc's temporary name (unlinked since): it is known by its inode."""

    def named() -> set[str]:
        return {n for n in os.listdir("/dev/shm") if n.startswith("sem.mp-")}

    there = named()
    held = multiprocessing.get_context("spawn").Lock()  # named in /dev/shm until its children open it
    (mine,) = named() - there
    orphan = "sem.mp-orphan-of-a-test"  # a semaphore no process maps: the negative control
    shutil.copyfile(f"/dev/shm/{mine}", f"/dev/shm/{orphan}")
    deleted = delete_orphan_semaphores()
    assert orphan in deleted and not os.path.exists(f"/dev/shm/{orphan}")
    assert mine not in deleted and os.path.exists(f"/dev/shm/{mine}")
    with held:
        pass


@pytest.mark.parametrize("parent", ["its own", "one that died before it was set"])
def test_a_process_whose_parent_is_already_gone_exits_instead_of_running_on(parent):
    """A worker whose parent (the training process, or the fork server) died before the parent-death signal was
    set would run on, an orphan: it exits at once; under its real parent it runs on (the negative control)."""
    given = os.getpid() if parent == "its own" else 0  # an orphan's parent is init, or a subreaper: never the given
    code = "import sys; from app.processes import die_with_parent; die_with_parent(int(sys.argv[1])); print('ran on')"
    result = subprocess.run([sys.executable, "-c", code, str(given)], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout.strip()) == ((0, "ran on") if parent == "its own" else (1, "")), \
        result.stderr
    assert ("its parent, process 0, ended before it started" in result.stderr) == (parent != "its own")
