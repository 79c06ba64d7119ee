"""The enqueuer's settings: the `Queue` a command runs, the batch it fills, and the ring slots its splits can fill."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from app.data.pixels.decode import Pixels
from app.loader.bad_samples import PolicyNames


@dataclass(frozen=True, kw_only=True)
class Queue:
    """The queue group as a command runs it, built once: each `auto` chosen before (app/capacity/auto.py), as is."""

    workers: int = 2
    max_size: int = 2
    use_multiprocessing: bool = True
    start_method: str = "forkserver"
    timeout_s: float = 120.0
    startup_timeout_s: float = 300.0

    @classmethod
    def of(cls, queue, *, workers: int, max_size: int) -> Queue:
        return cls(workers=workers, max_size=max_size, use_multiprocessing=queue.use_multiprocessing,
                   start_method=str(queue.start_method.value), timeout_s=queue.timeout_s,
                   startup_timeout_s=queue.startup_timeout_s)

    @property  # worker processes forked from a server that imported their modules (their pages shared)
    def forked(self) -> bool:
        return self.use_multiprocessing and self.start_method == "forkserver"

    def with_slots(self, slots: int) -> Queue:
        # this queue as a loader runs it: max_size the `slots` its ring holds (ring_slots caps them)
        return replace(self, max_size=slots)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """How the enqueuer works: the batch it fills, and the queue it runs."""

    batch_size: int
    image_size: tuple[int, int]
    queue: Queue = Queue()
    max_bad_fraction: float = 0.0  # skip: above this share of a split, an error
    bad_log: Path | None = None  # skip: where each skipped sample is listed
    policy_names: PolicyNames = PolicyNames()  # how a bad sample's message names the settings
    pixels: Pixels = Pixels()  # the images' bands and type (data.channels, data.dtype): a ring slot's
    mask_dtype: str | None = None  # a mask beside each image (data.task=segmentation); None: labels alone

    @property
    def batch_bytes(self) -> int:
        """One batch as the ring holds it: its images, and their masks."""
        height, width = self.image_size
        mask = 0 if self.mask_dtype is None else np.dtype(self.mask_dtype).itemsize
        return self.batch_size * height * width * (self.pixels.bands * np.dtype(self.pixels.dtype).itemsize + mask)

    @classmethod
    def of(cls, data, queue: Queue, *, bad_log: Path | None = None, pixels: Pixels = Pixels()) -> Settings:
        """The settings of a loaded config's data group, running `queue`."""
        return cls(batch_size=data.batch_size, image_size=tuple(data.image_size), queue=queue,
                   max_bad_fraction=data.max_bad_fraction, bad_log=bad_log, pixels=pixels)


def ring_slots(max_size: int, splits: dict[str, int], batch_size: int) -> tuple[int, str | None]:
    """(ring slots, why fewer than `max_size` or None) for `splits` (name → samples): none past the largest pass."""
    if not splits:
        return max_size, None
    name = max(splits, key=splits.__getitem__)
    most = max(1, -(-splits[name] // batch_size))
    if max_size <= most:
        return max_size, None
    return most, (f"queue.max_size={max_size} capped at {most} ring slot(s): a pass over the {name} split "
                  f"({splits[name]} samples, the largest this loader serves) is at most {most} batch(es) of "
                  f"{batch_size}, so a slot past them would be shared memory that never fills")


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
