"""Memory of the whole process tree: the training process and its loader workers.

Proportional set size (PSS) counts shared pages (the ring, shared libraries) once across
processes instead of once per process, as RSS would. Sampled every 100 ms in a thread.
"""

from __future__ import annotations

import logging
import os
import threading

import psutil

log = logging.getLogger(__name__)

MIB = 2**20


def tree_pss_bytes(root: psutil.Process | None = None) -> int:
    root = root or psutil.Process()
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total


class PeakMemory:
    def __init__(self, interval_s: float = 0.1, pid: int | None = None):
        """The tree under `pid` (default: this process)."""
        self.interval_s = interval_s
        self.peak = 0  # bytes, over the whole run
        self.samples = 0  # how many times the tree was read
        self._window = 0  # bytes, since the last window_peak_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="app-peak-memory", daemon=True)
        self._root = psutil.Process(pid)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> int:
        now = tree_pss_bytes(self._root)
        self.samples += 1
        self.peak = max(self.peak, now)
        self._window = max(self._window, now)
        return now

    def window_peak_mb(self) -> float:
        """Peak since the previous call (one epoch), in MiB; starts the next window."""
        peak, self._window = max(self._window, self.sample()), 0
        return peak / MIB

    def __enter__(self) -> PeakMemory:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)


def is_multiprocessing_helper(process: psutil.Process) -> bool:
    """multiprocessing's resource tracker and fork server live as long as this process, by design."""
    try:
        cmdline = " ".join(process.cmdline())
    except psutil.Error:
        return True
    return "resource_tracker" in cmdline or ("forkserver" in cmdline and process.ppid() == os.getpid())


def leftovers_cleared(shm_dir: str = "/dev/shm") -> str:
    """Checked before a job starts (in a sweep, after the previous one): no worker process and no
    ring segment of this process may be left. Any found is ended or removed, and named."""
    found = []
    for child in psutil.Process().children(recursive=True):
        if not is_multiprocessing_helper(child):
            found.append(f"process {child.pid}")
            child.kill()
    prefix = f"app-ring-{os.getpid()}-"
    for name in os.listdir(shm_dir) if os.path.isdir(shm_dir) else []:
        if name.startswith(prefix):
            found.append(f"{shm_dir}/{name}")
            os.unlink(os.path.join(shm_dir, name))
    if found:
        log.error("a previous job left %s behind: removed", ", ".join(found))
        return "cleared: " + ", ".join(found)
    return "clean"
