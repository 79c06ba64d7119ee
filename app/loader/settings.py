"""How the enqueuer works (app/loader/enqueuer.py): the batch it fills and the queue config's
keys, read once from a loaded config. No TensorFlow: worker processes import the loader."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    """How the enqueuer works: the batch it fills, and the queue config's keys."""

    batch_size: int
    image_size: tuple[int, int]
    workers: int = 2
    use_multiprocessing: bool = True
    max_size: int = 2
    start_method: str = "spawn"
    timeout_s: float = 120.0
    startup_timeout_s: float = 300.0
    max_bad_fraction: float = 0.0  # skip: above this share of a split, an error
    bad_log: Path | None = None  # skip: where each skipped sample is listed

    @classmethod
    def from_config(cls, config, bad_log: Path | None = None, batch_size: int | None = None) -> Settings:
        """The settings `data` and `queue` of a loaded config (app/config.py) describe."""
        data, queue = config.data, config.queue
        return cls(batch_size or data.batch_size, tuple(data.image_size), queue.workers, queue.use_multiprocessing,
                   queue.max_size, str(queue.start_method.value), queue.timeout_s, queue.startup_timeout_s,
                   data.max_bad_fraction, bad_log)
