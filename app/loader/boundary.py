"""The one place uint8 becomes float32: one batch at a time, on the consumer's side.

So the queue holds uint8 (a quarter of float32's bytes). `float_batches` converts the next
batch in a thread while the current one trains, so a training step never waits for the
conversion, yet at most two float32 batches exist: the one training and the next.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import numpy as np

# Pixel values 0..255 → 0..1. model.keras carries the same as its first layer.
SCALE = 1.0 / 255.0
OFFSET = 0.0
_DONE = object()


def to_float32(batch: np.ndarray) -> np.ndarray:
    """A new float32 array (one allocation), so the ring slot can be reused at once."""
    out = np.multiply(batch, np.float32(SCALE), dtype=np.float32)
    if OFFSET:
        out += np.float32(OFFSET)
    return out


def float_batches(enqueuer, split_name: str, order: np.ndarray, epoch: int,
                  ahead: bool = True) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(float32 batch, labels) in order. With `ahead`, the next batch is converted while the
    consumer works on this one; the consumer must drop its batch before asking for the next
    (as app.steps does) for the two-batch bound to hold."""
    batches = enqueuer.batches(split_name, order, epoch)
    if not ahead:
        for images, labels in batches:
            yield to_float32(images), labels
        return
    handoff: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def convert() -> None:
        last = _DONE
        try:
            for images, labels in batches:
                if stop.is_set():
                    return
                handoff.put((to_float32(images), labels))
                handoff.join()  # the next conversion starts only once the consumer has this one
        except BaseException as error:  # noqa: BLE001 - re-raised in the consumer's thread
            last = error
        finally:
            batches.close()
        if not stop.is_set():
            handoff.put(last)

    thread = threading.Thread(target=convert, name="app-boundary", daemon=True)
    thread.start()
    try:
        while True:
            item = handoff.get()
            handoff.task_done()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
            del item
    finally:
        stop.set()
        deadline = time.monotonic() + 5.0  # a converter stuck on a hung worker is left to close()
        while thread.is_alive() and time.monotonic() < deadline:
            try:  # unblock a converter waiting on the handoff
                handoff.get_nowait()
                handoff.task_done()
            except queue.Empty:
                pass
            thread.join(timeout=0.05)
