"""What the loader measures while it works, for the training's telemetry: the time a sample
spends in each stage of a worker (read, decode, augment, copy into its ring slot) and the storage
retries its reads made (a copy at a URL: app/data/storage.py), summed from the workers' share
messages, and how full the ring is each time the training asks for a batch.
Each reader has its window (`take("epoch")` for metrics.csv, `take("live")` for the logger
every trainer.log_every_steps): the figures since that reader's last take. No TensorFlow.
"""

from __future__ import annotations

STAGES = ("read", "decode", "augment", "copy")
WINDOWS = ("epoch", "live")


class _Sums:
    def __init__(self):
        self.seconds, self.samples, self.fill, self.asked = [0.0] * len(STAGES), 0, 0.0, 0
        self.retries = 0


class Telemetry:
    def __init__(self):
        self._windows = {name: _Sums() for name in WINDOWS}

    def add_stages(self, stages: tuple) -> None:
        """A worker's (read, decode, augment, copy) seconds, its sample count and its storage retries."""
        for sums in self._windows.values():
            for k in range(len(STAGES)):
                sums.seconds[k] += stages[k]
            sums.samples += stages[len(STAGES)]
            sums.retries += stages[len(STAGES) + 1]

    def observe_fill(self, slots: list, ring_slots: int) -> None:
        """When a batch is asked for: the share of the ring's slots holding a whole batch not yet
        consumed (`slots`: the enqueuer's, each with its `batch_no` and the positions `todo`)."""
        ready = sum(1 for slot in slots if slot.batch_no >= 0 and not slot.todo)
        for sums in self._windows.values():
            sums.fill += ready / ring_slots
            sums.asked += 1

    def take(self, window: str) -> dict:
        """{read_ms, decode_ms, augment_ms, copy_ms: mean milliseconds a sample; ring_fill: mean
        share of full slots (None when no batch came through the ring); storage_retries: reads
        tried again} since `window`'s last take."""
        sums, self._windows[window] = self._windows[window], _Sums()
        n = sums.samples
        figures = {f"{name}_ms": 1000 * s / n if n else None for name, s in zip(STAGES, sums.seconds, strict=True)}
        figures["ring_fill"] = sums.fill / sums.asked if sums.asked else None
        figures["storage_retries"] = sums.retries
        return figures
