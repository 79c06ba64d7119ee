"""The step loop: batches in, one Keras train or test step each, callbacks around them.

Steps are driven here rather than by `fit`: Keras's generator adapter adds a
`prefetch(AUTOTUNE)` of batches nobody sees; here the batch training and the next one are
all there is outside the ring.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import keras
import numpy as np


@dataclass
class EpochFigures:
    steps: int = 0
    images: int = 0
    loss_sum: float = 0.0
    correct: float = 0.0
    waited_s: float = 0.0  # between the end of one step and the start of the next
    seconds: float = 0.0  # from the epoch's start to the end of its last step

    def add(self, logs: dict, n: int) -> None:
        self.steps += 1
        self.images += n
        self.loss_sum += float(logs["loss"]) * n
        self.correct += float(logs["accuracy"]) * n

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.images, 1)

    @property
    def accuracy(self) -> float:
        return self.correct / max(self.images, 1)

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds if self.seconds else 0.0

    @property
    def data_wait_fraction(self) -> float:
        return self.waited_s / self.seconds if self.seconds else 0.0

    def logs(self) -> dict:
        return {"loss": self.loss, "accuracy": self.accuracy, "images_per_s": self.images_per_s}

    def state(self) -> dict:
        """The running sums, for a checkpoint inside the epoch."""
        return asdict(self)


@dataclass
class RunState:
    """Where training is: what a checkpoint stores and what a resume restores."""

    config: dict
    epoch: int = 0  # 0-based, the epoch under way
    steps_before_epoch: int = 0
    order: np.ndarray | None = None  # this epoch's sample indices
    figures: EpochFigures | None = None  # this epoch's running sums
    best: list | None = None  # [val_accuracy, checkpoint name]

    def checkpoint(self, batches_done: int, *, complete: bool, metrics: dict | None = None) -> dict:
        return {"epoch": self.epoch, "batch_in_epoch": batches_done, "epoch_complete": complete,
                "step": self.steps_before_epoch + batches_done, "figures": self.figures.state(),
                "best": self.best, "metrics": metrics, "config": self.config}


def train_epoch(net: keras.Model, batches: Iterable[tuple[np.ndarray, np.ndarray]],
                callbacks: keras.callbacks.CallbackList, figures: EpochFigures | None = None,
                first_batch: int = 0) -> EpochFigures:
    """Train on every batch; callbacks see the running epoch means. A resumed epoch passes the
    sums it had and the index of its next batch. Stops early when a callback sets
    `net.stop_training`."""
    figures = figures or EpochFigures()
    started = step_end = time.perf_counter() - figures.seconds
    for step, (x, y) in enumerate(batches, start=first_batch):
        figures.waited_s += time.perf_counter() - step_end
        callbacks.on_train_batch_begin(step)
        logs = net.train_on_batch(x, y, return_dict=True)  # Keras resets its metrics each call
        del x  # this batch goes now, before the next one is made
        figures.add(logs, len(y))
        figures.seconds = time.perf_counter() - started
        callbacks.on_train_batch_end(step, figures.logs())
        step_end = time.perf_counter()
        if net.stop_training:
            break
    figures.seconds = step_end - started
    return figures


def evaluate(net: keras.Model, batches: Iterable[tuple[np.ndarray, np.ndarray]]) -> EpochFigures:
    """Loss and accuracy over every batch, weighted by batch size (the last may be short)."""
    figures = EpochFigures()
    started = time.perf_counter()
    for x, y in batches:
        figures.add(net.test_on_batch(x, y, return_dict=True), len(y))
    figures.seconds = time.perf_counter() - started
    return figures
