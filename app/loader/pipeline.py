"""The one builder of the input pipeline, for every command (train, evaluate, predict, bench):
a source's splits, each with its transforms → augmenters (the draft rule logged) → the enqueuer
(workers, ring) → batches copied out one ahead (prefetch); and for the queue's `auto` probe, one
sample built here as a worker builds it, and the cap on workers. Never imports TensorFlow, the
model or training."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from app.augment import augmenters
from app.loader import prefetch
from app.loader.enqueuer import Enqueuer
from app.loader.order import epoch_order
from app.loader.settings import Settings, most_workers, usable_cores
from app.loader.worker import make_sample

__all__ = ["Loader", "batches", "build_loader", "every_sample", "make_sample", "most_workers", "usable_cores"]

Loader = Enqueuer  # what a command holds: start it with `with`, read batches with the functions below


def build_loader(config, splits: dict[str, tuple], *, bad_log: Path | None = None,
                 on_bad_sample: str | None = None, batch_size: int | None = None) -> Loader:
    """The loader a loaded config (app/config.py) describes. `splits`: name → (split, its
    transforms: training's, or [] for the resize alone). `on_bad_sample` replaces
    data.on_bad_sample; `batch_size` data.batch_size (one process's share of a global batch)."""
    built = augmenters(config.data, {name: transforms for name, (_, transforms) in splits.items()})
    return Enqueuer.from_config(config, {name: split for name, (split, _) in splits.items()}, built,
                                Settings.from_config(config, bad_log, batch_size), on_bad_sample)


def batches(loader: Loader, split_name: str, order: np.ndarray, epoch: int) -> Iterator[tuple]:
    """(uint8 batch, labels) over `order`, each batch an array of its own, the next copied out ahead."""
    return prefetch.batches(loader, split_name, order, epoch)


def every_sample(loader: Loader, split_name: str) -> Iterator[tuple]:
    """Each sample of a split once, in order, the last batch short (validation, evaluate, predict)."""
    order = epoch_order(len(loader.splits[split_name]), seed=0, epoch=0, shuffle=False)
    return prefetch.batches(loader, split_name, order, 0)
