"""Epoch order: a function of (seed, epoch) only, so every worker count and every resume sees the same batches;
drawn with replacement by per-sample weights where data.sampling asks, each draw of an index numbered."""

from __future__ import annotations

import numpy as np


def epoch_order(n: int, *, seed: int, epoch: int, shuffle: bool, weights: np.ndarray | None = None) -> np.ndarray:
    """This epoch's indices: permuted by (seed, epoch), or as they are; with `weights`, n drawn with replacement."""
    if weights is not None:
        return np.random.default_rng([seed, epoch]).choice(n, size=n, replace=True, p=weights / weights.sum())
    return np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)


def class_balanced(labels: np.ndarray) -> np.ndarray:
    """A weight a sample, inverse to its class's size: each class drawn as often as any other."""
    labels = np.asarray(labels)
    return 1.0 / np.bincount(labels)[labels]


def draws_of(order: np.ndarray) -> np.ndarray:
    """Which draw of its index each entry of an epoch's `order` is (0 the first): each draw is augmented apart."""
    by_index = np.argsort(order, kind="stable")  # each index's entries together, in epoch order
    ranked = order[by_index]
    starts = np.r_[0, np.flatnonzero(np.diff(ranked)) + 1]  # where each index's run begins
    run_start = np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    draws = np.empty(len(order), np.int64)
    draws[by_index] = np.arange(len(order)) - run_start
    return draws


def full_batches(order: np.ndarray, batch_size: int) -> np.ndarray:
    """`order` less its last `len(order) % batch_size` samples: training takes full batches only."""
    return order[: len(order) - len(order) % batch_size]
