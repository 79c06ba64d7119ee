"""`max_size` slots of one batch each (the run's bands and type; a mask a sample where the targets are masks), a `done`
byte a sample, in one POSIX shared-memory segment reserved up front (posix_fallocate): a /dev/shm too small fails at
start-up, not with a SIGBUS."""

from __future__ import annotations

import logging
import mmap
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from app.data.pixels.decode import Pixels
from app.errors import WorkerError
from app.processes import signals_held

SHM_DIR = "/dev/shm"
PREFIX = "app-ring-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-[0-9a-f]+$")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RingSpec:
    """What a worker needs to map the ring: picklable, a few bytes."""

    name: str | None  # shared-memory segment, or None for an in-process ring
    shape: tuple[int, ...]  # (slots, batch, H, W, bands)
    dtype: str = "uint8"
    mask_dtype: str | None = None  # data.task=segmentation: an (H, W) mask of class indices beside each image

    @property
    def nbytes(self) -> int:
        """The pixels and masks: the queue's memory."""
        return self._image_bytes + self._mask_bytes

    @property
    def _image_bytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize

    @property
    def _mask_bytes(self) -> int:
        return 0 if self.mask_dtype is None else int(np.prod(self.shape[:4])) * np.dtype(self.mask_dtype).itemsize

    @property
    def segment_bytes(self) -> int:
        """The pixels and a `done` byte a sample."""
        return self.nbytes + self.shape[0] * self.shape[1]

    def views(self, buffer) -> tuple[np.ndarray, np.ndarray]:
        """(pixels, done) over a buffer of `segment_bytes`."""
        pixels = np.ndarray(self.shape, self.dtype, buffer=buffer)
        done = np.ndarray(self.shape[:2], np.uint8, buffer=buffer, offset=self.nbytes)
        return pixels, done

    def slots(self, buffer) -> Slots:
        """What a worker writes a sample into, over a buffer of `segment_bytes`."""
        pixels, _ = self.views(buffer)
        masks = None if self.mask_dtype is None else np.ndarray(self.shape[:4], self.mask_dtype, buffer=buffer,
                                                                  offset=self._image_bytes)
        return Slots(pixels, masks)


class Slots:
    """The ring's batches as a worker writes them: `slots[slot, position] = image`, or an (image, mask) pair."""

    def __init__(self, images: np.ndarray, masks: np.ndarray | None = None):
        self.images, self.masks = images, masks

    def __setitem__(self, where: tuple[int, int], sample) -> None:
        if self.masks is None:
            self.images[where] = sample
            return
        image, mask = sample if isinstance(sample, tuple) else (sample, sample)  # a marked sample: zeros in both
        self.images[where], self.masks[where] = image, mask


class Ring:
    def __init__(self, slots: int, batch: tuple[int, int, int], *, shared: bool, pixels: Pixels = Pixels(),
                 mask_dtype: str | None = None):
        """`batch`: (batch size, H, W); `pixels`: the images' bands and type; `mask_dtype`: a mask's (None: none)."""
        self.spec = RingSpec(None, (slots, *batch, pixels.bands), pixels.dtype, mask_dtype)
        self._shm = None
        if not shared:
            self._map(bytearray(self.spec.segment_bytes))
            return
        free = _free_bytes(SHM_DIR)
        if self.spec.segment_bytes > free:  # refused before a byte is reserved: tmpfs pages are the machine's RAM
            raise _too_big(self.spec, free, "not enough space")
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        try:  # Python registers the segment with its resource tracker, which it may first have to start: a
            with signals_held():  # Ctrl-C or SIGTERM then waits for the segment to be whole, and frees it below
                self._shm = shared_memory.SharedMemory(name=name, create=True, size=self.spec.segment_bytes)
                os.posix_fallocate(segment_fd(self._shm), 0, self.spec.segment_bytes)
        except BaseException as error:
            made = self._shm is not None
            self._unlink()
            if made and isinstance(error, OSError):  # posix_fallocate: the space is not there
                raise _too_big(self.spec, _free_bytes(SHM_DIR), error.strerror) from None
            raise
        self.spec = RingSpec(name, self.spec.shape, self.spec.dtype, mask_dtype)
        self._map(self._shm.buf)

    def _map(self, buffer) -> None:
        self.array, self.done = self.spec.views(buffer)
        self.slots = self.spec.slots(buffer)
        self.masks = self.slots.masks  # None: the targets are labels, kept by the enqueuer

    @property
    def nbytes(self) -> int:
        return self.spec.nbytes

    def close(self) -> None:
        self.array = self.done = self.slots = self.masks = None  # the buffer cannot close while a view exports it
        self._unlink()

    def _unlink(self) -> None:
        if self._shm is not None:
            self._shm.unlink()  # first: from here on nothing is left in /dev/shm, whatever comes
            shm, self._shm = self._shm, None
            try:
                shm.close()
            except BufferError:  # a consumer still holds a view: the mapping goes with it
                pass


def segment_fd(segment: shared_memory.SharedMemory) -> int:
    """The segment's open file descriptor, for posix_fallocate: SharedMemory keeps it private."""
    return segment._fd


def delete_orphan_segments(shm_dir: str = SHM_DIR) -> list[str]:
    """Delete the ring segments whose creator no longer runs (a reused PID keeps its own); returns their paths."""
    removed = []
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return removed
    for name in names:
        match = _NAME.match(name)
        if not match or _alive(int(match.group(1))):
            continue
        path = os.path.join(shm_dir, name)
        try:
            size = os.stat(path).st_size
            os.unlink(path)
        except OSError:  # another process removed it first
            continue
        removed.append(path)
        log.warning("removed %s (%.1f MiB): a ring left by process %s, which no longer runs (killed with its "
                    "whole process group, say)", path, size / 2**20, match.group(1))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def attach(spec: RingSpec) -> tuple[np.ndarray, np.ndarray, mmap.mmap]:
    """Worker side: (pixels, done, mapping), mapped by path: SharedMemory's tracker (Python < 3.13) would claim it."""
    fd = os.open(os.path.join(SHM_DIR, spec.name), os.O_RDWR)
    try:
        buffer = mmap.mmap(fd, spec.segment_bytes)
    finally:
        os.close(fd)
    return (*spec.views(buffer), buffer)


def _free_bytes(path: str) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


def _too_big(spec: RingSpec, free: int, why: str) -> WorkerError:
    slots, batch_size, height, width, bands = spec.shape
    return WorkerError(
        f"the queue's shared memory needs {spec.segment_bytes / 2**20:.1f} MiB "
        f"(queue.max_size={slots} × batch {batch_size} × {height}×{width}×{bands} {spec.dtype}) "
        f"but {SHM_DIR} has {free / 2**20:.1f} MiB free ({why}). Lower queue.max_size "
        f"(at most {max(free // max(spec.segment_bytes // slots, 1), 0)} slots fit) or data.batch_size, "
        f"or enlarge {SHM_DIR} (docker: --shm-size).")
