"""A run's plan: what it derives from its config once its devices are known (its share of each global batch, the
queue with `auto` chosen, the probe's figures). The config stays as written; what a run makes of it is read here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from app.capacity.auto import Choice
from app.data.decode import Pixels
from app.loader.settings import Settings
from app.rules import AUTO


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunPlan:
    batch_size: int  # this process's share of each global batch: the whole batch with one process
    workers: int | str  # queue.workers, `auto` until the probe chooses
    max_size: int | str  # queue.max_size, likewise
    device_is_host: bool  # no GPU: the device's memory is the host's
    allocator_mib: float = 0.0  # the GPU allocator's bookkeeping in host memory (calibration.planner sets it)
    choice: Choice | None = None  # the probe's, when it chose
    pixels: Pixels = Pixels()  # the images' bands and type, as the data gave them (app/data/pixels.py)

    @classmethod
    def of(cls, config, *, processes: int = 1, device_is_host: bool, pixels: Pixels = Pixels()) -> RunPlan:
        """The plan of a loaded config trained by `processes` processes, before any probe."""
        return cls(batch_size=config.data.batch_size // processes, workers=config.queue.workers,
                   max_size=config.queue.max_size, device_is_host=device_is_host, pixels=pixels)

    def chosen(self, choice: Choice | None) -> RunPlan:
        """This plan with the probe's workers and slots, or itself when the probe chose nothing."""
        if choice is None:
            return self
        return dataclasses.replace(self, workers=choice.workers, max_size=choice.max_size, choice=choice)

    def loader_settings(self, config, bad_log: Path | None = None) -> Settings:
        """The loader's settings for this plan: its batch and its queue (one still `auto`: Settings resolves it)."""
        queue = {key: value for key, value in (("workers", self.workers), ("max_size", self.max_size)) if value != AUTO}
        return dataclasses.replace(Settings.from_config(config, bad_log, self.pixels), batch_size=self.batch_size,
                                   **queue)
