"""Epoch order: a function of (seed, epoch) only, so every worker count and every resume sees the same batches."""

from __future__ import annotations

import numpy as np


def epoch_order(n: int, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """Sample indices 0..n-1 in this epoch's order: a permutation drawn from (seed, epoch), or as they are."""
    return np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)


def full_batches(order: np.ndarray, batch_size: int) -> np.ndarray:
    """`order` less its last `len(order) % batch_size` samples: training takes full batches only."""
    return order[: len(order) - len(order) % batch_size]
