"""The process tree's memory, each page once: the root's RSS less shared, each child's USS less its ring's, rings whole
(PSS splits pages machine-wide). USS and rings re-read on a process change, a RECHECK_BYTES move or FULL_EVERY_S."""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time

import psutil

from app.loader.ring import PREFIX as RING_PREFIX
from app.loader.ring import SHM_DIR

log = logging.getLogger(__name__)

MIB = 2**20
RECHECK_BYTES = MIB
FULL_EVERY_S = 2.0


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:  # the root has gone
        return []


def tree_bytes(root: psutil.Process | None = None) -> int:
    """The tree's figure now: the root's RSS less shared memory, its children's USS less the ring's, its rings whole."""
    root, *children = _tree(root or psutil.Process()) or [None]
    if root is None:
        return 0
    return _root_bytes(root) + sum(child_bytes(child.pid) for child in children) + rings_bytes(root.pid)


def _root_bytes(process: psutil.Process) -> int:
    """RSS less RssShmem (the ring's pages, counted whole by `rings_bytes`): cheap (/proc/<pid>/status)."""
    fields = {}
    try:
        with open(f"/proc/{process.pid}/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "RssShmem:")):
                    name, value = line.split(":", 1)
                    fields[name] = int(value.split()[0]) * 1024
    except OSError:  # gone
        return 0
    return fields.get("VmRSS", 0) - fields.get("RssShmem", 0)


# `shared_anonymous`: with the anonymous pages it shares with the children it forked (its heap, and the pages of its
# libraries written to once loaded), counted here once: a page shared is in no process's USS
def private_bytes(pid: int, shared_anonymous: bool = False) -> int:
    """The pages only this process maps (USS), less a ring's: an unread slot a worker wrote is the ring's, not its."""
    total, mapping = 0, {"counted": True}
    try:
        with open(f"/proc/{pid}/smaps") as smaps:
            for line in itertools.chain(smaps, ["end of the last mapping"]):
                name, _, rest = line.partition(":")
                if " " in name:  # a mapping's header: address range, permissions, offset, device, inode, path
                    if shared_anonymous and mapping["counted"]:
                        total += max(mapping.get("Anonymous", 0) - mapping.get("Private_Dirty", 0), 0)
                    mapping = {"counted": f"{SHM_DIR}/{RING_PREFIX}" not in line}
                elif name in ("Private_Clean", "Private_Dirty", "Anonymous"):
                    mapping[name] = int(rest.split()[0]) * 1024
                    total += mapping[name] if mapping["counted"] and name != "Anonymous" else 0
    except OSError:  # gone
        return 0
    return total


# A child's share of the tree: its USS; a fork server's with the modules its workers share with it
def child_bytes(pid: int) -> int:
    return private_bytes(pid, shared_anonymous=is_fork_server(pid))


# multiprocessing's fork server: the children it forks have its very command line, its parent another
def is_fork_server(pid: int) -> bool:
    try:
        own = _cmdline(pid)
        return b"multiprocessing.forkserver" in own and _cmdline(psutil.Process(pid).ppid()) != own
    except psutil.Error:  # gone
        return False


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except OSError:  # gone
        return b""


# What this process's fork server holds (its modules, shared with its workers), or 0 without one
def fork_server_bytes() -> int:
    return sum(child_bytes(child.pid) for child in _tree(psutil.Process())[1:] if is_fork_server(child.pid))


def rings_bytes(pid: int, shm_dir: str = SHM_DIR) -> int:
    """The space the rings of process `pid` reserve in `shm_dir`: all of it is memory, read or not."""
    total = 0
    prefix = f"{RING_PREFIX}{pid}-"
    for name in os.listdir(shm_dir) if os.path.isdir(shm_dir) else []:
        if name.startswith(prefix):
            try:
                total += os.stat(os.path.join(shm_dir, name)).st_blocks * 512
            except OSError:  # removed meanwhile
                pass
    return total


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
        self.private_reads = 0  # how many of those read the children's private memory (USS)
        self._window = 0  # bytes, since the last window_peaks_mb()
        self.peak_root = self.peak_children = 0  # bytes: the root process alone, its children together
        self._window_roles = [0, 0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="app-peak-memory", daemon=True)
        self._root = psutil.Process(pid)
        self._read_at: dict[int, tuple[int, int]] = {}  # child's pid → its counters at the last USS read
        self._children = self._rings = 0  # bytes: the children's private memory, the rings, at the last read
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
        root, *children = _tree(self._root) or [None]
        root_bytes = _root_bytes(root) if root is not None else 0
        counters = {p.pid: c for p in children if (c := _counters(p)) is not None}
        moved = counters.keys() != self._read_at.keys() or any(
            abs(now - then) >= RECHECK_BYTES
            for pid, values in counters.items() for now, then in zip(values, self._read_at[pid], strict=True))
        if moved or time.monotonic() - self._last_read >= FULL_EVERY_S:
            self._children = sum(child_bytes(pid) for pid in counters)
            self._rings = rings_bytes(self._root.pid)
            self._read_at, self._last_read = counters, time.monotonic()
            self.private_reads += 1
        root_bytes += self._rings  # the training process's: it made the rings
        total = root_bytes + self._children
        self.peak_root, self.peak_children = max(self.peak_root, root_bytes), max(self.peak_children, self._children)
        self._window_roles = [max(self._window_roles[0], root_bytes), max(self._window_roles[1], self._children)]
        self.samples += 1
        self.peak = max(self.peak, total)
        self._window = max(self._window, total)
        return total

    def window_peaks_mb(self) -> dict:
        """Peaks in MiB since the last call (one epoch) of the tree, the root and its children; starts a new window."""
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
    return "resource_tracker" in cmdline or (is_fork_server(process.pid) and process.ppid() == os.getpid())


def kill_leftovers_and_delete_segments(shm_dir: str = SHM_DIR) -> str:
    """Before a job: SIGKILL this process's leftover workers, delete its ring segments; "clean" or what was cleared."""
    found = []
    for child in psutil.Process().children(recursive=True):
        if not is_multiprocessing_helper(child):
            found.append(f"process {child.pid}")
            child.kill()
    prefix = f"{RING_PREFIX}{os.getpid()}-"
    for name in os.listdir(shm_dir) if os.path.isdir(shm_dir) else []:
        if name.startswith(prefix):
            found.append(f"{shm_dir}/{name}")
            os.unlink(os.path.join(shm_dir, name))
    if found:
        log.error("a previous job left %s behind: removed", ", ".join(found))
        return "cleared: " + ", ".join(found)
    return "clean"
