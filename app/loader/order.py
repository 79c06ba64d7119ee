"""Which samples an epoch visits, in which order: a function of (seed, epoch) only, so every
worker count and every resume sees the same batches. No TensorFlow."""

from __future__ import annotations

import numpy as np


def epoch_order(n: int, batch_size: int, *, seed: int, epoch: int, shuffle: bool, drop_last: bool) -> np.ndarray:
    """Sample indices of one epoch, from (seed, epoch) only. Training drops the last
    `n mod batch_size` of the permutation (different ones each shuffled epoch)."""
    order = np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)
    if drop_last:
        order = order[: n - n % batch_size]
    return order
