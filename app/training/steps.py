"""The step loop: batches in, one Keras train or test step each, callbacks around them.

Steps are driven here rather than by `fit`: Keras's generator adapter adds a
`prefetch(AUTOTUNE)` of batches nobody sees; here the batch training and the next one are
all there is outside the ring.
Never imports the loader: batches come as arrays.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import keras
import numpy as np

from app.training.checkpoint import EpochFigures, RunState

__all__ = ["EpochFigures", "RunState", "evaluate", "train_epoch"]


def train_epoch(net: keras.Model, batches: Iterable[tuple[np.ndarray, np.ndarray]],
                callbacks: keras.callbacks.CallbackList, figures: EpochFigures | None = None,
                first_batch: int = 0) -> EpochFigures:
    """Train on every batch; callbacks see the running epoch means. A resumed epoch passes the
    sums it had and the index of its next batch. Stops early when a callback sets
    `net.stop_training`."""
    figures = figures or EpochFigures()
    # A resumed epoch's clock goes on from the seconds it had; the time before the resume
    # (process start, model load) is neither training nor waiting.
    step_end = time.perf_counter()
    started = step_end - figures.seconds
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


EPSILON = 1e-7  # keras.backend.epsilon(): Keras's crossentropy clips probabilities to [ε, 1 − ε]


def evaluate(net: keras.Model, batches: Iterable[tuple[np.ndarray, np.ndarray]],
             confusion: np.ndarray | None = None) -> EpochFigures:
    """Loss and accuracy over every batch, weighted by batch size (the last may be short), from
    one forward pass a batch: the probabilities, scored as Keras's sparse categorical
    crossentropy and accuracy score them. With `confusion` (classes × classes), each sample is
    counted into it too. Validation in training and the `evaluate` command both use this."""
    figures = EpochFigures()
    started = time.perf_counter()
    for x, y in batches:
        p = np.asarray(net.predict_on_batch(x), np.float64)
        p /= p.sum(axis=1, keepdims=True)
        picked = np.clip(p[np.arange(len(y)), y], EPSILON, 1 - EPSILON)
        predicted = p.argmax(axis=1)
        figures.add({"loss": float(-np.log(picked).mean()), "accuracy": float((predicted == y).mean())}, len(y))
        if confusion is not None:
            np.add.at(confusion, (y, predicted), 1)
    figures.seconds = time.perf_counter() - started
    return figures
