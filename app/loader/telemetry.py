"""The loader's telemetry (worker stage seconds, storage retries, ring fill), each reader's since its own last take."""

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
        """At a batch request: the share of ring slots holding a whole unconsumed batch (`slots`: the enqueuer's)."""
        ready = sum(1 for slot in slots if slot.batch_no >= 0 and not slot.todo)
        for sums in self._windows.values():
            sums.fill += ready / ring_slots
            sums.asked += 1

    def take(self, window: str) -> dict:
        """Since `window`'s last take: {stage}_ms (mean a sample), ring_fill (None if unobserved), storage_retries."""
        sums, self._windows[window] = self._windows[window], _Sums()
        n = sums.samples
        figures = {f"{name}_ms": 1000 * s / n if n else None for name, s in zip(STAGES, sums.seconds, strict=True)}
        figures["ring_fill"] = sums.fill / sums.asked if sums.asked else None
        figures["storage_retries"] = sums.retries
        return figures
