"""The worker loop, for threads and processes alike: read → decode to uint8 → augment → write into a ring slot."""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from typing import Any

import cv2
import numpy as np

from app.data.copies.retries import thread_retries
from app.data.split import Split
from app.errors import BadSampleError
from app.loader import messages
from app.loader.bad_samples import MAX_REPLACEMENTS
from app.loader.native_stderr import NativeStderr
from app.loader.ring import RingSpec, attach
from app.processes import close_fork_server_alive_pipe, die_with_parent, keep_freed_memory

# Single-threaded workers: with two cores, worker threads would fight TF's own pools.
THREAD_ENV = {name: "1" for name in (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS")}
# What every worker imports: a fork server imports them once and its workers share their pages.
PRELOADED = ["app.loader.worker", "app.augment"]
# The process that imported this module: in a forked worker, its server's where the preload took (multiprocessing
# keeps a server started before the preload was set, and Python 3.11's swallows a preload that fails to import)
IMPORTED_IN = os.getpid()


def make_sample(split: Split, augmenter: Any, index: int, *, seed: int, epoch: int) -> np.ndarray:
    image = split.read(index, augmenter.decode, (seed, epoch, 0))
    return augmenter(image, seed, epoch, index)


_local = threading.local()  # each worker thread's (or process's) stage times since its last share
_native: list[NativeStderr] = []  # a worker process's caught descriptor 2 (threads leave it alone)


NO_STAGES = (0.0, 0.0, 0.0, 0.0, 0, 0)


def take_stages() -> tuple[float, ...]:
    """(read, decode, augment, copy) seconds, samples built and storage retries of this thread since the last call."""
    stages = getattr(_local, "stages", None) or NO_STAGES
    _local.stages = NO_STAGES
    return stages


def _build_timed(ring, task: messages.Task, work, item: messages.Item) -> None:
    """The item's sample read, decoded, augmented and copied into its place, each stage timed."""
    split, augmenter, index = work.splits[task.split], work.augmenters[task.split], item.index
    retries, t0 = thread_retries(), time.perf_counter()
    raw = split.fetch(index, augmenter.decode, (work.seed, task.epoch, item.draw))  # a random patch's place
    t1 = time.perf_counter()
    retries = thread_retries() - retries
    image = split.decode(index, raw, augmenter.decode)
    t2 = time.perf_counter()
    sample = augmenter(image, work.seed, task.epoch, index, item.draw)
    t3 = time.perf_counter()
    ring[task.slot, item.position] = sample
    t4 = time.perf_counter()
    read, decoded, augmented, copied, n, retried = getattr(_local, "stages", None) or NO_STAGES
    _local.stages = (read + t1 - t0, decoded + t2 - t1, augmented + t3 - t2, copied + t4 - t3, n + 1,
                     retried + retries)


def serve(conn, ring: np.ndarray, done: np.ndarray, work) -> None:
    """Answer tasks until STOP arrives or the parent's end of the pipe closes; `work` is a pool.Work."""
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is messages.STOP:
            return
        for item in task.items:
            reply = fill(ring, task, work, item)
            for caught in _native:
                caught.write_named(_describe(work.splits[task.split], item.index))
            if isinstance(reply, messages.Written):
                done[task.slot, item.position] = 1  # after its pixels
            else:
                conn.send(reply)
        conn.send(messages.ShareDone(task.slot, task.fill, take_stages()))


def fill(ring, task: messages.Task, work, item: messages.Item) -> messages.Written | messages.SampleNote:
    """Build the item's sample into its slot; the reply says what became of it (work.on_bad_sample if unreadable)."""
    split, augmenter = work.splits[task.split], work.augmenters[task.split]
    position, index = item.position, item.index
    try:
        try:
            _build_timed(ring, task, work, item)
            return messages.Written(task.slot, position)
        except BadSampleError as bad:
            note = {"slot": task.slot, "position": position, "index": index, "where": bad.where, "detail": bad.reason}
            if work.on_bad_sample == "mark":
                ring[task.slot, position] = 0
                return messages.Marked(**note)
            if work.on_bad_sample != "skip":
                return messages.Bad(**note)
            # Deterministic stand-in, so the batch keeps its size: the next readable sample,
            # augmented with the bad sample's own randomness.
            for k in range(1, min(MAX_REPLACEMENTS, len(split))):
                stand_in = (index + k) % len(split)
                try:
                    image = split.read(stand_in, augmenter.decode, (work.seed, task.epoch, item.draw))
                except BadSampleError:
                    continue
                ring[task.slot, position] = augmenter(image, work.seed, task.epoch, index, item.draw)
                return messages.Skipped(**note, stand_in=stand_in)
            return messages.Stranded(**note)
    except Exception as error:  # noqa: BLE001 - carried to the parent with its traceback
        return messages.Failed(slot=task.slot, position=position, index=index, where=_describe(split, index),
                               detail="".join(traceback.format_exception(error)))


def _describe(split: Any, index: int) -> str:
    try:
        return split.describe(index)
    except Exception:  # noqa: BLE001
        return f"sample {index}"


def prepare_process() -> None:
    """What a worker process does to itself before its first sample (bench's serial mode too)."""
    cv2.setNumThreads(0)  # OpenCV's own pool ignores OMP_NUM_THREADS
    keep_freed_memory()


def process_main(conn, spec: RingSpec, work, parent_pid: int | None, environment: dict[str, str]) -> None:
    """Entry point of a worker process; `parent_pid`: its parent's, the training process's or the fork server's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the training process's to handle
    # a fork server's child starts with the server's environment: it takes the parent's as of its start (storage keys)
    os.environ.clear()
    os.environ.update(environment)
    die_with_parent(parent_pid)
    close_fork_server_alive_pipe()
    prepare_process()
    _native.append(NativeStderr())
    _, done, buffer = attach(spec)
    ring = spec.slots(buffer)
    try:
        conn.send(messages.Ready(preloaded=IMPORTED_IN != os.getpid()))
        serve(conn, ring, done, work)
    finally:
        del ring, done, _
        buffer.close()
        conn.close()
