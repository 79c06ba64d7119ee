"""The step loop: batches in, one Keras train or test step each, callbacks around them.

Steps are driven here rather than by `fit`: Keras's generator adapter adds a
`prefetch(AUTOTUNE)` of batches nobody sees; here the batch training and the next one are
all there is outside the ring.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

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


def train_epoch(net: keras.Model, batches: Iterable[tuple[np.ndarray, np.ndarray]],
                callbacks: keras.callbacks.CallbackList) -> EpochFigures:
    """Train on every batch; callbacks see the running epoch means. Stops early when a
    callback sets `net.stop_training`."""
    figures = EpochFigures()
    started = step_end = time.perf_counter()
    for step, (x, y) in enumerate(batches):
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
