"""Memory accounting of the process tree, and the check between a sweep's jobs."""

import multiprocessing
import os
import subprocess
import sys
import time
from multiprocessing import shared_memory

import numpy as np
import psutil

from app.capacity import memory as memory_module
from app.capacity.memory import (
    PeakMemory,
    child_bytes,
    fork_server_bytes,
    is_fork_server,
    kill_leftovers_and_delete_segments,
    private_bytes,
    tree_bytes,
)
from app.loader.ring import Ring


def test_peak_counts_children_too():
    # the child's sleep only keeps it alive to be measured: the test waits for its "ready" line
    child = subprocess.Popen([sys.executable, "-c", "import numpy as np, time; a = np.ones(64 * 2**20 // 8); "
                              "print('ready', flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"  # its 64 MiB array is written
        memory = PeakMemory()
        memory.sample()
        assert memory.peak >= memory.peak_root + 60 * 2**20  # the child's 64 MiB array is in the tree's figure
        assert tree_bytes() >= memory.peak * 0.8
    finally:
        child.kill()
        child.wait()


def test_children_are_read_again_only_when_they_move(monkeypatch):
    """A child's private size (a page-table walk) is read again when its resident size moved,
    not every sample; with the full read forced every time (negative control) it is read every
    sample. The root's figure is cheap and read every sample."""
    # the grandchild's sleep only keeps it alive to be measured: the test reads its "idle" and "ok" lines
    code = ("import subprocess, sys; child = subprocess.Popen([sys.executable, '-c', 'import sys, numpy as np, time; "
            "print(\\'idle\\', flush=True); sys.stdin.readline(); a = np.ones(64 * 2**20 // 8); "
            "print(\\'ok\\', flush=True); time.sleep(30)'], "
            "stdin=sys.stdin, stdout=sys.stdout); print(child.pid, flush=True); child.wait()")
    root = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        int(root.stdout.readline())
        assert root.stdout.readline().strip() == "idle"  # started, numpy imported, waiting for its go
        memory = PeakMemory(pid=root.pid)
        for _ in range(5):
            memory.sample()
        assert (memory.samples, memory.private_reads) == (5, 1)  # idle: read once
        before = memory.peak
        root.stdin.write("go\n")
        root.stdin.flush()
        assert root.stdout.readline().strip() == "ok"
        memory.sample()
        assert memory.private_reads == 2 and memory.peak >= before + 60 * 2**20  # moved: read again
        assert abs(memory.peak - tree_bytes(psutil.Process(root.pid))) < 2 * 2**20

        monkeypatch.setattr(memory_module, "FULL_EVERY_S", 0.0)
        forced = PeakMemory(pid=root.pid)
        for _ in range(3):
            forced.sample()
        assert forced.private_reads == 3
    finally:
        for process in psutil.Process(root.pid).children():
            process.kill()
        root.kill()
        root.wait()


def test_a_fork_servers_modules_are_counted_once_with_it():
    """The pages of the modules a fork server imported are shared with the children it forks: USS counts them in
    none of them, so the server's figure holds them (its anonymous memory, shared or not), and a child's is its USS."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["app.loader.worker", "app.augment"])  # as the loader's (OpenCV, albumentations)
    child = context.Process(target=time.sleep, args=(60,), daemon=True)
    child.start()
    try:
        server = next(p.pid for p in psutil.Process().children(recursive=True) if is_fork_server(p.pid))
        assert child_bytes(server) >= private_bytes(server) + 20 * 2**20  # the shared modules: tens of MiB
        assert fork_server_bytes() == child_bytes(server)
        assert not is_fork_server(child.pid) and child_bytes(child.pid) == private_bytes(child.pid)  # negative control
    finally:
        child.kill()
        child.join(timeout=30)


def test_the_ring_counts_whole_and_once_whoever_wrote_it():
    """The ring's space is reserved up front: memory before any slot is written, counted once,
    in the training process; a slot a worker wrote is the ring's, not the worker's."""
    base = PeakMemory().sample()
    ring = Ring(8, (16, 256, 256), shared=True)  # 24 MiB, none of it written yet
    code = ("import sys; from app.loader.ring import RingSpec, attach; "
            "pixels, done, buffer = attach(RingSpec(sys.argv[1], tuple(map(int, sys.argv[2:])))); pixels[:] = 1; "
            "print('ok', flush=True); sys.stdin.readline()")
    writer = None
    try:
        with_ring = PeakMemory().sample()
        assert 23 * 2**20 <= with_ring - base <= 30 * 2**20
        writer = subprocess.Popen([sys.executable, "-c", code, ring.spec.name, *map(str, ring.spec.shape)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline().strip() == "ok"
        own = private_bytes(writer.pid)
        # negative control: USS counts the slots it alone wrote as its own
        assert psutil.Process(writer.pid).memory_full_info().uss - own >= 23 * 2**20
        # the written 24 MiB counted again (as the worker's) would be far over; the slack is this
        # process's own growth between the two samples (pytest's, up to ~5 MiB here)
        assert PeakMemory().sample() - with_ring <= own + 10 * 2**20
    finally:
        if writer:
            writer.communicate("\n", timeout=30)
        ring.close()


def test_leftovers_of_a_previous_job_are_found_and_removed():
    assert kill_leftovers_and_delete_segments() == "clean"  # negative control
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a leftover, alive until cleared
    segment = shared_memory.SharedMemory(name=f"app-ring-{os.getpid()}-test", create=True, size=4096)
    np.ndarray((4096,), np.uint8, buffer=segment.buf)[:] = 1
    report = kill_leftovers_and_delete_segments()
    assert f"process {stray.pid}" in report and segment.name in report
    stray.wait(timeout=5)
    assert not os.path.exists(f"/dev/shm/{segment.name}")
    segment.close()
    from multiprocessing import resource_tracker

    resource_tracker.unregister(segment._name, "shared_memory")  # already removed above
    assert kill_leftovers_and_delete_segments() == "clean"


def test_the_trainer_and_its_workers_apart_in_every_window(monkeypatch):
    """peak_trainer_mb is this process's figure, peak_workers_mb its children's together; a window
    in which nothing moved (no read of the children) still reports them, as it reports the tree."""
    monkeypatch.setattr(memory_module, "RECHECK_BYTES", 2**40)  # nothing counts as moved: one read only
    monkeypatch.setattr(memory_module, "FULL_EVERY_S", 1e9)
    child = subprocess.Popen([sys.executable, "-c", "import numpy as np; a = np.ones(64 * 2**20 // 8); "
                              "print('ok', flush=True); import sys; sys.stdin.readline()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ok"  # its 64 MiB array is written
        memory = PeakMemory()
        first, second = memory.window_peaks_mb(), memory.window_peaks_mb()
        assert memory.private_reads == 1  # the second window read nothing
        for window in (first, second):
            assert window["peak_workers_mb"] >= 60 and window["peak_trainer_mb"] > 0
            assert abs(window["peak_trainer_mb"] + window["peak_workers_mb"] - window["peak_memory_mb"]) < 1
        alone = memory_module._root_bytes(psutil.Process()) / 2**20
        assert abs(first["peak_trainer_mb"] - alone) < 16  # negative control: the root is this process alone
    finally:
        child.communicate("\n", timeout=30)
