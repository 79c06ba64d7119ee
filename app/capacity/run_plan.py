"""A run's plan: what it derives from its config once its devices are known (its share of each global batch, the
queue with `auto` chosen, the probe's figures). The config stays as written; what a run makes of it is read here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from app.capacity.auto import Asked, Choice
from app.data.pixels.decode import Pixels
from app.loader.settings import Queue, Settings


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunPlan:
    batch_size: int  # this process's share of each global batch: the whole batch with one process
    device_is_host: bool  # no GPU: the device's memory is the host's
    queue: Queue | None = None  # the queue the run takes (queue_plan.probed sets it, `auto` chosen); None before
    allocator_mib: float = 0.0  # the GPU allocator's bookkeeping in host memory (calibration.planner sets it)
    choice: Choice | None = None  # the probe's, when it chose
    pixels: Pixels = Pixels()  # the images' bands and type, as the data gave them (app/data/pixels/pixels.py)
    asked: Asked | None = None  # queue.workers and max_size as asked, a null made the machine's (auto.asked)

    @classmethod
    def of(cls, data, *, processes: int = 1, device_is_host: bool, pixels: Pixels = Pixels(),
           asked: Asked | None = None) -> RunPlan:
        """The plan of a loaded config's data group trained by `processes` processes, before its queue is chosen."""
        return cls(batch_size=data.batch_size // processes, device_is_host=device_is_host, pixels=pixels,
                   asked=asked)

    def chosen(self, queue: Queue, choice: Choice | None = None) -> RunPlan:
        """This plan running `queue`, and the probe's `choice` where it made one."""
        return dataclasses.replace(self, queue=queue, choice=choice)

    def loader_settings(self, data, bad_log: Path | None = None) -> Settings:
        """The loader's settings for this plan: its batch share and its queue."""
        return dataclasses.replace(Settings.of(data, self.queue, bad_log=bad_log, pixels=self.pixels),
                                   batch_size=self.batch_size)
