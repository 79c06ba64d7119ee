"""Peak memory of the whole process tree: the training process and its loader workers.

Proportional set size (PSS) counts shared pages (the ring, shared libraries) once across
processes instead of once per process, as RSS would. Sampled every 100 ms in a thread.
"""

from __future__ import annotations

import threading

import psutil

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
