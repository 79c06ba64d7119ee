"""A data source whose every image says which sample it is, for loader tests.

Importable by spawned worker processes (pytest puts tests/ on sys.path, and spawn hands the
parent's sys.path to its children). It can log each read to a file, fail, hang or be
unreadable at chosen indices: the loader's real workers meet these for real.
"""

from __future__ import annotations

import copy
import os
import re
import signal
import time

import numpy as np

from app.data.split import WholeImages
from app.errors import BadSampleError


def marked_image(index: int, size: int) -> np.ndarray:
    """Every pixel of channel 0 and 1 holds the index's low and high byte; channel 2 is 7."""
    image = np.empty((size, size, 3), np.uint8)
    image[..., 0] = index % 256
    image[..., 1] = index // 256
    image[..., 2] = 7
    return image


def index_of(image: np.ndarray) -> int:
    return int(image[0, 0, 0]) + 256 * int(image[0, 0, 1])


class MarkedSplit(WholeImages):
    """A split (app/data/split.py's contract) whose sample i is `marked_image` of the sample it shows."""

    def __init__(self, n: int, size: int = 8, *, log_path: str | None = None, crash_at: int | None = None,
                 hang_at: int | tuple[int, ...] | None = None, bad: tuple[int, ...] = (), kills_at: int | None = None,
                 spins: bool = False):
        self.n, self.size, self.log_path, self.spins = n, size, log_path, spins
        self.hang_at = {hang_at} if isinstance(hang_at, int) else set(hang_at or ())
        self.crash_at, self.bad, self.kills_at = crash_at, set(bad), kills_at
        self.labels = np.arange(n, dtype=np.int64) % 3
        self.shown = np.arange(n)  # the sample each index shows: a `take` keeps its own

    def __len__(self) -> int:
        return self.n

    def __setstate__(self, state: dict) -> None:
        if state.get("unpicklable"):  # a worker process cannot rebuild this source
            raise RuntimeError("this source cannot be rebuilt in a worker process")
        held, deadline = state.get("held_until"), time.monotonic() + 30
        while held and not os.path.exists(held) and time.monotonic() < deadline:  # a worker held in its start
            time.sleep(0.01)
        self.__dict__.update(state)

    def describe(self, i: int, drawn=None) -> str:
        return f"/data/marked/{self.shown[i]:05d}.png"

    def take(self, picked: np.ndarray) -> MarkedSplit:
        part = copy.copy(self)
        part.n, part.labels, part.shown = len(picked), self.labels[picked], self.shown[picked]
        return part

    def largest_decode_bytes(self, decode) -> tuple[int, int]:
        return self.size * self.size * 3, 0

    def fetch(self, i: int, decode=None, drawn=None) -> np.ndarray:  # as ArraySplit: the pixels come whole
        return self.read(i)

    def decode(self, i: int, raw: np.ndarray, decode=None) -> np.ndarray:
        return raw

    def read(self, i: int, decode=None, drawn=None) -> np.ndarray:
        shown = int(self.shown[i])
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(f"{shown} {os.getpid()} {os.environ.get('MARKED_SEEN', '-')}\n")  # the worker's environment
        if shown in self.bad:
            raise BadSampleError(i, self.describe(i), "truncated file")
        if shown == self.crash_at:
            raise RuntimeError(f"decoder exploded on purpose at {shown}")
        if shown in self.hang_at:
            time.sleep(3600)
        if self.spins:  # hung in C code that holds the GIL: no thread of the worker runs again
            re.match(r"(a+)+$", "a" * 64 + "b")
        if shown == self.kills_at:  # a sample that kills whichever process decodes it
            os.kill(os.getpid(), signal.SIGKILL)
        return marked_image(shown, self.size)


class IdentityAugmenter:
    """No randomness, no resize: what a worker wrote is what the source gave."""

    decode = None

    def __call__(self, image, seed, epoch, index, draw=0):
        return image
