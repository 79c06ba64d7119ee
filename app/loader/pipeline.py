"""The one builder of the input pipeline, for every command (train, evaluate, predict, bench),
and `Loader`, the one type a command holds of it: a source's splits, each with its transforms →
augmenters (the draft rule logged) → the enqueuer (workers, ring) → batches copied out one
ahead (prefetch); and for the queue's `auto` probe and the memory plan, one sample built here
as a worker builds it, the cap on workers and the ring's slots a loader's splits can fill.
Never imports TensorFlow, the model or training."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.augment import augmenters
from app.loader import prefetch
from app.loader.enqueuer import Enqueuer
from app.loader.order import epoch_order
from app.loader.settings import Settings, most_workers, ring_slots, usable_cores
from app.loader.worker import make_sample

__all__ = ["Loader", "QueueFigures", "build_loader", "make_sample", "most_workers", "ring_slots", "usable_cores"]


@dataclass(frozen=True, kw_only=True)
class QueueFigures:
    """The queue a loader runs, as the log and summary.json give it."""

    workers: int
    processes: bool  # worker processes; else threads
    max_size: int  # uint8 batches the ring holds
    bytes: int  # the ring's size


class Loader:
    """What a command holds of the input pipeline: started and stopped with `with`, batches of a
    split, the samples it could not read, a telemetry snapshot and the queue's figures. The
    enqueuer, its workers, ring and bad-sample policy stay the loader's own."""

    def __init__(self, enqueuer: Enqueuer):
        self._enqueuer = enqueuer

    def __enter__(self) -> Loader:
        self._enqueuer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._enqueuer.close()  # every worker stopped, the ring freed

    def batches(self, split_name: str, order: np.ndarray, epoch: int) -> Iterator[tuple]:
        """(uint8 batch, labels) over `order`, each batch an array of its own, the next copied out ahead."""
        return prefetch.batches(self._enqueuer, split_name, order, epoch)

    def every_sample(self, split_name: str) -> Iterator[tuple]:
        """Each sample of a split once, in order, the last batch short (validation, evaluate, predict)."""
        order = epoch_order(len(self._enqueuer.splits[split_name]), seed=0, epoch=0, shuffle=False)
        return self.batches(split_name, order, 0)

    def failed(self, split_name: str) -> dict[int, str]:
        """Position in the split → error, of each sample the `mark` policy could not read so far
        (kept up to date as batches come)."""
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
        """The loader's figures since `window` ("epoch" or "live") was last read: stage times a
        sample and the ring's fill (app/loader/telemetry.py)."""
        return self._enqueuer.telemetry.take(window)

    @property
    def queue(self) -> QueueFigures:
        enqueuer = self._enqueuer
        return QueueFigures(workers=enqueuer.num_workers, processes=enqueuer.use_multiprocessing,
                            max_size=enqueuer.max_size, bytes=enqueuer.queue_bytes)

    @property
    def worker_pids(self) -> list[int]:
        return self._enqueuer.worker_pids


def build_loader(config, splits: dict[str, tuple], *, bad_log: Path | None = None,
                 on_bad_sample: str | None = None, batch_size: int | None = None) -> Loader:
    """The loader a loaded config (app/config.py) describes. `splits`: name → (split, its
    transforms: training's, or [] for the resize alone). `on_bad_sample` replaces
    data.on_bad_sample; `batch_size` data.batch_size (one process's share of a global batch)."""
    built = augmenters(config.data, {name: transforms for name, (_, transforms) in splits.items()})
    return Loader(Enqueuer.from_config(config, {name: split for name, (split, _) in splits.items()}, built,
                                       Settings.from_config(config, bad_log, batch_size), on_bad_sample=on_bad_sample))
