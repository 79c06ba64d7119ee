"""The one builder of the input pipeline for every command, and `Loader`, all a command holds of it: splits →
augmenters → enqueuer (workers, ring) → batches copied out one ahead; and what the `auto` probe and memory plan use."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from app.augment import augmenters
from app.data.pixels.pixels import run_pixels
from app.loader import prefetch
from app.loader.enqueuer import Enqueuer
from app.loader.order import epoch_order
from app.loader.ring import delete_orphan_segments
from app.loader.settings import Queue, Settings, ring_slots, usable_cores
from app.loader.worker import make_sample

__all__ = ["Loader", "Queue", "build_loader", "make_sample", "ring_slots", "usable_cores"]


class Loader:
    """What a command holds of the input pipeline: `with` deletes dead processes' rings, starts it, stops it."""

    def __init__(self, enqueuer: Enqueuer):
        self._enqueuer = enqueuer

    def __enter__(self) -> Loader:
        if self._enqueuer.shares_memory:  # what processes killed with their group left, before this one makes its own
            delete_orphan_segments()
        self._enqueuer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._enqueuer.close()  # every worker stopped, the ring freed

    def batches(self, split_name: str, order: np.ndarray, epoch: int,
                draws: np.ndarray | None = None) -> Iterator[tuple]:
        """(uint8 batch, labels) over `order`, each its own array, the next copied ahead; `draws`: order.draws_of."""
        return prefetch.batches(self._enqueuer, split_name, order, epoch, draws=draws)

    def every_sample(self, split_name: str) -> Iterator[tuple]:
        """Each sample of a split once, in order, the last batch short (validation, evaluate, predict)."""
        order = epoch_order(len(self._enqueuer.splits[split_name]), seed=0, epoch=0, shuffle=False)
        return self.batches(split_name, order, 0)

    def readable(self, split_name: str) -> Iterator[tuple]:
        """`every_sample`'s batches as (images, labels, positions), but samples `mark` could not read."""
        failed, start = self.failed(split_name), 0
        for x, y in self.every_sample(split_name):
            positions = np.arange(start, start + len(y))
            start += len(y)
            keep = np.array([p not in failed for p in positions], bool)
            if keep.any():
                yield x[keep], y[keep], positions[keep]

    def failed(self, split_name: str) -> dict[int, str]:
        """Sample index → error, of each sample of the split the `mark` policy could not read so far."""
        return self._enqueuer.bad.failed[split_name]

    @property
    def skipped(self) -> int:
        """Samples the `skip` policy replaced so far, every split."""
        return sum(len(indices) for indices in self._enqueuer.bad.skipped.values())

    @property
    def restarts(self) -> int:
        """Workers replaced so far (one died: the OOM killer, say)."""
        return self._enqueuer.restarts

    def telemetry(self, window: str) -> dict:
        """The loader's figures since `window` ("epoch" or "live") was last taken: see telemetry.Telemetry.take."""
        return self._enqueuer.telemetry.take(window)

    @property
    def queue(self) -> Queue:
        # the queue it runs, as the log and summary.json give it: max_size the batches its ring holds
        return self._enqueuer.queue.with_slots(self._enqueuer.slot_count)

    @property
    def queue_bytes(self) -> int:
        return self._enqueuer.queue_bytes

    @property
    def worker_pids(self) -> list[int]:
        return self._enqueuer.worker_pids


def build_loader(config, splits: dict[str, tuple], *, queue: Queue | None = None, settings: Settings | None = None,
                 on_bad_sample: str | None = None) -> Loader:
    """The loader a config describes running the command's `queue`, or the enqueuer's `settings` (a run's batch share
    and chosen queue, the model's image size); `splits`: name → (split, transforms); `on_bad_sample` overrides."""
    if (queue is None) == (settings is None):
        raise TypeError("build_loader takes the command's queue= or the enqueuer's settings=, one of them")
    first = next(iter(splits.values()))[0]
    settings = settings or Settings.of(config.data, queue, pixels=run_pixels(config.data, first))
    settings = dataclasses.replace(settings, mask_dtype=first.mask_dtype)  # the splits' kind: images, or pairs
    built = augmenters(config.data, {name: transforms for name, (_, transforms) in splits.items()},
                       image_size=settings.image_size, pixels=settings.pixels, masks=first.mask_dtype is not None)
    return Loader(Enqueuer.from_config(config, {name: split for name, (split, _) in splits.items()}, built,
                                       settings, on_bad_sample=on_bad_sample))
