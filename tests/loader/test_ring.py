"""The ring: shared memory that workers map by name, and that leaves nothing behind."""

import os
import signal
from multiprocessing import shared_memory

import numpy as np
import pytest

from app.loader.ring import Ring, attach, delete_orphan_segments, segment_fd


def test_worker_view_shares_the_parent_memory():
    ring = Ring(2, (3, 4, 5), shared=True)
    try:
        assert ring.nbytes == 2 * 3 * 4 * 5 * 3 and ring.array.shape == (2, 3, 4, 5, 3)
        view, done, buffer = attach(ring.spec)
        view[1, 2] = 200
        done[1, 2] = 1
        assert ring.array[1, 2].min() == 200 and ring.array[0].max() == 0
        assert ring.done.tolist() == [[0, 0, 0], [0, 0, 1]]  # the done bytes are shared too, apart from the pixels
        del view, done
        buffer.close()
        path = f"/dev/shm/{ring.spec.name}"
        assert os.path.exists(path)
    finally:
        ring.close()
    assert not os.path.exists(path)


def test_in_process_ring_has_no_segment():
    ring = Ring(1, (2, 4, 4), shared=False)
    assert ring.spec.name is None and isinstance(ring.array, np.ndarray) and ring.done.shape == (1, 2)
    ring.close()


def test_too_small_dev_shm_fails_at_start_with_the_size_needed():
    """Real: a 1 MiB tmpfs on /dev/shm in a private mount namespace."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) on this machine")
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this machine forbids a private tmpfs on /dev/shm: {probe.stderr.strip()}")
    code = """
import sys
from app.errors import WorkerError
from app.loader.ring import Ring
Ring(1, (4, 64, 64), shared=True).close()  # 48 KiB: fits (negative control)
try:
    Ring(8, (16, 64, 64), shared=True)      # 1.5 MiB: does not
except WorkerError as error:
    print(error)
    sys.exit(3)
"""
    result = subprocess.run(["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=1m tmpfs /dev/shm && '
                             f'exec "{sys.executable}" -c "$0"', code], capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert "needs 1.5 MiB" in result.stdout and "queue.max_size=8" in result.stdout
    assert "/dev/shm has 1.0 MiB free" in result.stdout


def test_a_ring_left_by_a_killed_process_group_is_deleted_as_the_next_loader_starts(caplog):
    """SIGKILL to the whole group (the resource tracker included) left the segment in
    /dev/shm for ever; start-up only removed segments carrying its own PID. The Loader's `with`
    calls delete_orphan_segments before its enqueuer makes its own ring (tests/loader/test_pipeline.py)."""
    import signal
    import subprocess
    import sys

    code = ("from app.loader.ring import Ring; r = Ring(2, (4, 16, 16), shared=True); "
            "import multiprocessing.resource_tracker as t; t.ensure_running(); print(r.spec.name, flush=True); "
            "import sys; sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    name = child.stdout.readline().strip()
    os.killpg(child.pid, signal.SIGKILL)  # a scheduler's kill of the job: every process of the group at once
    child.wait()
    path = f"/dev/shm/{name}"
    assert os.path.exists(path)  # left behind: nobody was there to remove it
    mine = Ring(1, (1, 4, 4), shared=True)  # negative control: a live process's ring is kept
    try:
        with caplog.at_level("WARNING"):
            removed = delete_orphan_segments()  # with any a test beside this one left as it killed its process
        assert path in removed and not os.path.exists(path)
        assert os.path.exists(f"/dev/shm/{mine.spec.name}")
        assert path in caplog.text and f"left by process {child.pid}, which no longer runs" in caplog.text
    finally:
        mine.close()


def test_a_ring_larger_than_dev_shm_is_free_is_refused_before_any_of_it_is_reserved(monkeypatch):
    """tmpfs pages are the machine's memory: a ring /dev/shm cannot hold is refused from its free
    space (as `df` reads it), not by reserving until it runs out."""
    import shutil
    from collections import namedtuple

    from app.errors import WorkerError

    real = shutil.disk_usage
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2**30, 2**30 - 2**20, 2**20))
    mine = f"app-ring-{os.getpid()}-"
    before = {n for n in os.listdir("/dev/shm") if n.startswith(mine)}
    with pytest.raises(WorkerError) as refused:
        Ring(8, (16, 64, 64), shared=True)  # 1.5 MiB, with 1 MiB free
    text = str(refused.value)
    assert "needs 1.5 MiB" in text and "queue.max_size=8" in text and "/dev/shm has 1.0 MiB free" in text
    assert "at most 5 slots fit" in text
    assert {n for n in os.listdir("/dev/shm") if n.startswith(mine)} == before  # nothing was made
    monkeypatch.setattr(shutil, "disk_usage", real)
    Ring(8, (16, 64, 64), shared=True).close()  # negative control: the real /dev/shm holds it


def test_segment_fd_is_the_segments_own_open_file():
    """SharedMemory's private `_fd`, as the ring uses it: posix_fallocate on it reserves the
    segment's own pages, and what is written through it is what the mapping shows."""
    segment = shared_memory.SharedMemory(create=True, size=4096)
    try:
        fd = segment_fd(segment)
        os.posix_fallocate(fd, 0, 4096)
        assert os.fstat(fd).st_size == 4096
        os.pwrite(fd, b"\x07", 10)
        assert segment.buf[10] == 7 and segment.buf[11] == 0
    finally:
        segment.close()
        segment.unlink()


def test_a_signal_while_the_segment_is_made_leaves_none(monkeypatch):
    """SIGTERM as the segment exists but before the ring holds it whole (Python registers it with its
    resource tracker, which it may have to start first: a slow moment under load)."""
    from multiprocessing import resource_tracker

    from app.processes import interrupts

    registered, mine = resource_tracker.register, f"app-ring-{os.getpid()}-"

    def register_then_signal(name, rtype):
        registered(name, rtype)
        if name.lstrip("/").startswith(mine):
            assert [n for n in os.listdir("/dev/shm") if n.startswith(mine)]  # the segment is there
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(resource_tracker, "register", register_then_signal)
    with pytest.raises(KeyboardInterrupt), interrupts():
        Ring(2, (4, 8, 8), shared=True)
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(mine)]


@pytest.mark.parametrize(("mask_dtype", "value"), [("uint8", 200), ("uint16", 1000)])
def test_masks_share_the_segment_with_the_pixels_and_a_worker_writes_pairs(mask_dtype, value):
    """data.task=segmentation: an (H, W) mask beside each image in the one segment, which a worker maps by its spec
    and writes through `spec.slots` as the worker loop does."""
    slots, batch, height, width = 2, 3, 5, 7
    ring = Ring(slots, (batch, height, width), shared=True, mask_dtype=mask_dtype)
    pixels, masks = slots * batch * height * width * 3, slots * batch * height * width * np.dtype(mask_dtype).itemsize
    try:
        assert ring.nbytes == pixels + masks and ring.spec.segment_bytes == pixels + masks + slots * batch
        assert os.stat(f"/dev/shm/{ring.spec.name}").st_size == ring.spec.segment_bytes
        assert ring.masks.shape == (slots, batch, height, width) and ring.masks.dtype == mask_dtype
        view, done, buffer = attach(ring.spec)
        written = ring.spec.slots(buffer)
        image = np.arange(height * width * 3, dtype=np.uint8).reshape(height, width, 3)
        mask = (np.arange(height * width).reshape(height, width) % 3).astype(mask_dtype)
        mask[0, 0] = value
        written[1, 2] = (image, mask)  # the last sample: its mask ends where the done bytes begin
        done[1, 2] = 1
        assert np.array_equal(ring.masks[1, 2], mask) and np.array_equal(ring.array[1, 2], image)
        assert ring.done.tolist() == [[0, 0, 0], [0, 0, 1]]  # the done byte written after the mask left it whole
        assert not ring.masks[0].any() and not ring.masks[1, :2].any() and not ring.array[1, :2].any()
        written[1, 2] = 0  # a marked sample (on_bad_sample=mark): zeros in both
        assert not ring.masks[1, 2].any() and not ring.array[1, 2].any()
        del view, done, written
        buffer.close()
    finally:
        ring.close()
    assert not os.path.exists(f"/dev/shm/{ring.spec.name}")


def test_a_ring_without_masks_has_none_and_no_room_for_them():
    """The negative control of the test above: labels are the enqueuer's, the segment pixels and done bytes alone."""
    ring = Ring(2, (3, 5, 7), shared=True)
    try:
        assert ring.masks is None and ring.slots.masks is None and ring.spec.mask_dtype is None
        assert ring.spec.segment_bytes == 2 * 3 * 5 * 7 * 3 + 2 * 3
        assert os.stat(f"/dev/shm/{ring.spec.name}").st_size == ring.spec.segment_bytes
        view, done, buffer = attach(ring.spec)
        written = ring.spec.slots(buffer)
        written[1, 2] = np.full((5, 7, 3), 9, np.uint8)  # an image, not a pair
        assert ring.array[1, 2].min() == 9 and ring.array[1, 1].max() == 0
        del view, done, written
        buffer.close()
    finally:
        ring.close()
    in_process = Ring(1, (2, 4, 4), shared=False, mask_dtype="uint16")  # an in-process ring holds masks too
    assert in_process.masks.shape == (1, 2, 4, 4) and in_process.masks.dtype == np.uint16
    in_process.close()
