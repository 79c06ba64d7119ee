"""The one place uint8 becomes float32: one batch at a time, on the consumer's side.

So the queue holds uint8 (a quarter of float32's bytes) and at most the batch being converted
and the batch being trained on exist as float32.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

# Pixel values 0..255 → 0..1. model.keras carries the same as its first layer.
SCALE = 1.0 / 255.0
OFFSET = 0.0


def to_float32(batch: np.ndarray) -> np.ndarray:
    """A new float32 array (one allocation), so the ring slot can be reused at once."""
    out = np.multiply(batch, np.float32(SCALE), dtype=np.float32)
    if OFFSET:
        out += np.float32(OFFSET)
    return out


def float_batches(enqueuer, split_name: str, order: np.ndarray, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for images, labels in enqueuer.batches(split_name, order, epoch):
        yield to_float32(images), labels
