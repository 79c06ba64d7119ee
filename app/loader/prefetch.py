"""The consumer's side of the ring: each batch copied out of its slot (freeing it), the next one ahead in a thread."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import numpy as np

_DONE = object()


def detach(images: np.ndarray) -> np.ndarray:
    """A batch out of its ring slot (a view) into an array of its own: the slot is free at once."""
    return images.copy()


def batches(enqueuer, split_name: str, order: np.ndarray, epoch: int, *,
            draws: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(uint8 batch, labels) in order, each its own array, the next copied out while the consumer works on this one. The
    consumer must drop its batch before asking for the next, or more than two batches live outside the ring."""
    source = enqueuer.batches(split_name, order, epoch, draws)
    handoff: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def copy_ahead() -> None:
        last = _DONE
        try:
            for images, targets in source:
                if stop.is_set():
                    return
                handoff.put((detach(images), np.array(targets)))  # masks are a view of the slot too: copied
                handoff.join()  # the next copy starts only once the consumer has this one
        except BaseException as error:  # noqa: BLE001 - re-raised in the consumer's thread
            last = error
        finally:
            source.close()
        if not stop.is_set():
            handoff.put(last)

    thread = threading.Thread(target=copy_ahead, name="app-prefetch", daemon=True)
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
        deadline = time.monotonic() + 5.0  # a thread stuck on a hung worker is left to close()
        while thread.is_alive() and time.monotonic() < deadline:
            try:  # unblock a thread waiting on the handoff
                handoff.get_nowait()
                handoff.task_done()
            except queue.Empty:
                pass
            thread.join(timeout=0.05)
