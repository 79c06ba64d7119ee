"""Memory of the whole process tree: the training process and its loader workers.

Proportional set size (PSS) counts shared pages (the ring, shared libraries) once across
processes instead of once per process, as RSS would. Sampled every 100 ms in a thread.

PSS is dear to read: the kernel walks every page table of the process, holding its memory-map
lock, and for a TensorFlow process that is enough CPU to slow training when done every 100 ms
(docs/performance.md has the figures). Resident and shared sizes are cheap (statm, a
counter each): every 100 ms they are read, and PSS is read again, for the whole tree, only
when one of them moved by RECHECK_BYTES since the last PSS read, a process came or went, or
FULL_EVERY_S passed. A process's PSS moves by no more than its resident size does, but for
pages it shares with processes outside the tree (libraries), which the full read every
FULL_EVERY_S catches up with; so the tree's figure is right to within RECHECK_BYTES a process.
Never imports TensorFlow (psutil reads /proc); the trainer and bench use it.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import psutil

log = logging.getLogger(__name__)

MIB = 2**20
RECHECK_BYTES = MIB
FULL_EVERY_S = 2.0


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:  # the root has gone
        return []


def tree_pss_bytes(root: psutil.Process | None = None) -> int:
    return sum(_pss(process) for process in _tree(root or psutil.Process()))


def _pss(process: psutil.Process) -> int:
    try:
        return process.memory_full_info().pss
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return 0


def _counters(process: psutil.Process) -> tuple[int, int] | None:
    """Resident and shared bytes (statm), or None for a process that has gone."""
    try:
        info = process.memory_info()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return info.rss, info.shared


class PeakMemory:
    def __init__(self, interval_s: float = 0.1, pid: int | None = None):
        """The tree under `pid` (default: this process)."""
        self.interval_s = interval_s
        self.peak = 0  # bytes, over the whole run
        self.samples = 0  # how many times the tree was sampled
        self.pss_reads = 0  # how many of those read every process's PSS
        self._window = 0  # bytes, since the last window_peaks_mb()
        self.peak_root = self.peak_children = 0  # bytes: the root process alone, its children together
        self._window_roles = [0, 0]
        self._roles = (0, 0)  # (root, children) PSS at the last read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="app-peak-memory", daemon=True)
        self._root = psutil.Process(pid)
        self._read_at: dict[int, tuple[int, int]] = {}  # pid → counters at the last PSS read
        self._pss = 0  # the tree's PSS at the last read
        self._last_read = float("-inf")
        self._lock = threading.Lock()  # the thread and window_peak_mb() both sample

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> int:
        with self._lock:
            return self._sample()

    def _sample(self) -> int:
        tree = _tree(self._root)
        counters = {p.pid: c for p in tree if (c := _counters(p)) is not None}
        moved = counters.keys() != self._read_at.keys() or any(
            abs(now - then) >= RECHECK_BYTES
            for pid, values in counters.items() for now, then in zip(values, self._read_at[pid], strict=True))
        if moved or time.monotonic() - self._last_read >= FULL_EVERY_S:
            each = {p.pid: _pss(p) for p in tree if p.pid in counters}
            self._pss = sum(each.values())
            self._roles = (each.get(self._root.pid, 0), self._pss - each.get(self._root.pid, 0))
            self._read_at, self._last_read = counters, time.monotonic()
            self.pss_reads += 1
        root, children = self._roles  # as last read, like the tree's figure: every window sees them
        self.peak_root, self.peak_children = max(self.peak_root, root), max(self.peak_children, children)
        self._window_roles = [max(self._window_roles[0], root), max(self._window_roles[1], children)]
        self.samples += 1
        self.peak = max(self.peak, self._pss)
        self._window = max(self._window, self._pss)
        return self._pss

    def window_peaks_mb(self) -> dict:
        """Peaks since the previous call (one epoch), in MiB, of the tree, of the root process
        (the trainer) and of its children together (the workers); starts the next window."""
        with self._lock:
            now = self._sample()
            peaks = {"peak_memory_mb": max(self._window, now) / MIB, "peak_trainer_mb": self._window_roles[0] / MIB,
                     "peak_workers_mb": self._window_roles[1] / MIB}
            self._window, self._window_roles = 0, [0, 0]
        return peaks

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
