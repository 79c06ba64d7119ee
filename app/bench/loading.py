"""A bench mode's Run, and the modes without a model: `loader` (with prefetch) and `serial` (the per-core rate)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

from app.errors import DataError
from app.loader.order import epoch_order, full_batches
from app.loader.pipeline import Queue, build_loader
from app.loader.worker import make_sample, prepare_process


class Clock:
    """Times batches: the first from the start, the rate over those after the warmup."""

    def __init__(self, warmup: int, batch: int):
        self.warmup, self.batch = warmup, batch
        self.start = time.perf_counter()
        self.marks: list[float] = []

    def tick(self) -> None:
        self.marks.append(time.perf_counter())

    def result(self) -> dict:
        count = len(self.marks) - self.warmup
        since = self.marks[self.warmup - 1] if self.warmup else self.start
        seconds = self.marks[-1] - since
        return {"images_per_s": count * self.batch / seconds, "first_batch_s": self.marks[0] - self.start,
                "timed_batches": count, "timed_seconds": seconds}


class TileClock:
    """Times a slide mode's tiles: from the `warmup`-th batch's end to its last slide's map (`finish`)."""

    def __init__(self, warmup: int):
        self.warmup, self.start, self.end = warmup, time.perf_counter(), time.perf_counter()
        self.marks: list[tuple[float, int]] = []  # a batch's end and the tiles predicted so far

    def tick(self, tiles: int) -> None:
        self.marks.append((time.perf_counter(), (self.marks[-1][1] if self.marks else 0) + tiles))

    def finish(self) -> None:
        self.end = time.perf_counter()

    def result(self) -> dict:
        if len(self.marks) <= self.warmup:  # every batch was warmup: nothing timed
            raise DataError(f"the validation slides' {self.marks[-1][1] if self.marks else 0} tiles make "
                            f"{len(self.marks)} batches, none left to time after bench.warmup={self.warmup}: lower "
                            "bench.warmup or data.batch_size, or bench larger slides")
        since, before = self.marks[self.warmup - 1] if self.warmup else (self.start, 0)
        tiles, seconds = self.marks[-1][1] - before, self.end - since
        return {"images_per_s": tiles / seconds, "tiles_per_s": tiles / seconds,
                "first_batch_s": self.marks[0][0] - self.start, "timed_batches": len(self.marks) - self.warmup,
                "timed_tiles": tiles, "timed_seconds": seconds}


@dataclass(kw_only=True)
class Run:
    """What a mode is given: name, config, queue, data, training augmentation, (epoch, sample index) pairs, clock."""

    mode: str
    config: object  # the loaded config (app/config.py)
    queue: Queue  # the bench's, `auto` resolved once by its parent (app/commands/bench.py)
    source: object
    augmenter: object
    order: object
    clock: Clock | TileClock  # TileClock: the slide modes'


def visit_order(n: int, batch: int, *, needed: int, seed: int, shuffle: bool) -> np.ndarray:
    """`needed` (epoch, sample index) pairs, epoch after epoch, full batches only; ValueError when n < batch."""
    if n < batch:  # no full batch in an epoch: the loop below would never end
        raise ValueError(f"{n} samples hold no full batch of {batch}")
    pairs, epoch = [], 0
    while len(pairs) < needed:
        order = full_batches(epoch_order(n, seed=seed, epoch=epoch, shuffle=shuffle), batch)
        pairs += [(epoch, int(i)) for i in order]
        epoch += 1
    return np.array(pairs[:needed])


def training_loader(run: Run):
    """This loader over the training split; its workers start when its `with` block is entered."""
    return build_loader(run.config, {"train": (run.source.train, run.config.augment.transforms)}, queue=run.queue)


def loader_batches(loader, order):
    """This loader's batches over `order`, one epoch's pass after another."""
    epochs = order[:, 0]
    for epoch in sorted(set(epochs.tolist())):
        indices = order[epochs == epoch, 1]
        yield from loader.batches("train", indices, int(epoch))


def loader_only(run: Run) -> None:
    order, clock = run.order, run.clock
    clock.start = time.perf_counter()
    with training_loader(run) as loader:
        for _ in loader_batches(loader, order):
            clock.tick()


def serial(run: Run) -> None:
    config, source, augmenter, order, clock = run.config, run.source, run.augmenter, run.order, run.clock
    prepare_process()  # single-threaded and keeping freed memory, as a worker is: the per-core rate
    batch = config.data.batch_size
    clock.start = time.perf_counter()
    for k, (epoch, index) in enumerate(order, start=1):
        make_sample(source.train, augmenter, int(index), seed=config.seed, epoch=int(epoch))
        if k % batch == 0:
            clock.tick()


# Lines of a TensorFlow error that say where, not what
WHERE = ("Graph execution error:", "Detected at node", "<stack traces unavailable>", "Node: ",
         "Traceback (most recent call last):", "[[")
PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit): ")


def reason(error: BaseException) -> str:
    """`error` in one line: its type and the message line that says what went wrong, inside a TensorFlow error too."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    said = next((line.strip() for line in lines if not line[0].isspace() and not line.startswith(WHERE)),
                lines[0].strip() if lines else "")
    return said if PYTHON_ERROR.match(said) else f"{type(error).__name__}: {said}"
