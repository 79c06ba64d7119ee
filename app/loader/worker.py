"""The worker loop: read → decode to uint8 → augment → write into a ring slot. No TensorFlow.

One loop serves threads and processes. A process says ("ready",) once it has started. Tasks
arrive a batch's share at a time as ("batch", split, epoch, slot, [(position, sample index), ...]).
A sample written sets its `done` byte in the ring; a sample that is bad, skipped, marked or
failed is answered with a message of its own; and a share ends with ("share", slot): one
wake-up of the parent a share.
"""

from __future__ import annotations

import signal
import traceback
from typing import Any

import cv2
import numpy as np

from app.errors import BadSampleError
from app.loader.ring import RingSpec, attach
from app.processes import die_with_parent, keep_freed_memory

# Single-threaded workers: with two cores, worker threads would fight TF's own pools.
THREAD_ENV = {name: "1" for name in (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS")}
MAX_REPLACEMENTS = 100  # `skip`: how many following samples to try in place of a bad one


def make_sample(split: Any, augmenter: Any, index: int, seed: int, epoch: int) -> np.ndarray:
    image = split.read(index, augmenter.decode)
    return augmenter(image, seed, epoch, index)


def serve(conn, ring: np.ndarray, done: np.ndarray, splits: dict, augmenters: dict, seed: int,
          on_bad_sample: str) -> None:
    """Answer tasks until a None arrives or the parent's end of the pipe closes."""
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        _, split_name, epoch, slot, items = task
        split, augmenter = splits[split_name], augmenters[split_name]
        for position, index in items:
            reply = fill(ring, slot, position, index, split, augmenter, seed, epoch, on_bad_sample)
            if reply[0] == "ok":
                done[slot, position] = 1  # after its pixels
            else:
                conn.send(reply)
        conn.send(("share", slot))


def fill(ring, slot, position, index, split, augmenter, seed, epoch, on_bad_sample: str) -> tuple:
    """Build one sample into its place; what became of it, as the reply to send.
    `on_bad_sample`: raise (a "bad" reply), skip (a stand-in), or mark (zeros, and a "marked" reply)."""
    try:
        try:
            ring[slot, position] = make_sample(split, augmenter, index, seed, epoch)
            return ("ok", slot, position)
        except BadSampleError as bad:
            if on_bad_sample == "mark":
                ring[slot, position] = 0
                return ("marked", slot, position, index, bad.where, bad.reason)
            if on_bad_sample != "skip":
                return ("bad", slot, position, index, bad.where, bad.reason)
            # Deterministic stand-in, so the batch keeps its size: the next readable sample,
            # augmented with the bad sample's own randomness.
            for k in range(1, min(MAX_REPLACEMENTS, len(split))):
                try:
                    image = split.read((index + k) % len(split), augmenter.decode)
                except BadSampleError:
                    continue
                ring[slot, position] = augmenter(image, seed, epoch, index)
                return ("skipped", slot, position, index, bad.where, bad.reason)
            return ("bad", slot, position, index, bad.where, f"{bad.reason}; and no readable stand-in nearby")
    except Exception as error:  # noqa: BLE001 - carried to the parent with its traceback
        where = _describe(split, index)
        text = "".join(traceback.format_exception(error))
        return ("error", slot, position, index, where, text)


def _describe(split: Any, index: int) -> str:
    try:
        return split.describe(index)
    except Exception:  # noqa: BLE001
        return f"sample {index}"


def prepare_process() -> None:
    """What a worker process does to itself before its first sample (bench's serial mode too)."""
    cv2.setNumThreads(0)  # OpenCV's own pool ignores OMP_NUM_THREADS
    keep_freed_memory()


def process_main(conn, spec: RingSpec, splits: dict, augmenters: dict, seed: int, on_bad_sample: str,
                 parent_pid: int | None) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the training process's to handle
    die_with_parent(parent_pid)
    prepare_process()
    ring, done, buffer = attach(spec)
    try:
        conn.send(("ready",))
        serve(conn, ring, done, splits, augmenters, seed, on_bad_sample)
    finally:
        del ring, done
        buffer.close()
        conn.close()
