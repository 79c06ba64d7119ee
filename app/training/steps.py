"""The step loop: uint8 batches → Keras's compiled train and test functions, steps_per_execution steps a call, the
callbacks fired as `fit` fires them, logs empty between metric reads (why not `fit`'s: docs/architecture.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import keras
import numpy as np

from app.model import pixel_dtype
from app.processes import stop_if_interrupted
from app.runs.checkpoint import EpochFigures, RunState
from app.training.feed import Feed, read, target_spec

__all__ = ["EpochFigures", "EpochPlan", "Feed", "RunState", "read", "target_spec", "train_epoch", "validate"]


def sync(net: keras.Model) -> None:
    """The model's variables as the last step left them (JAX keeps them apart while it steps)."""
    if keras.backend.backend() == "jax":
        net.jax_state_sync()


@dataclass(kw_only=True)
class EpochPlan:
    steps: int  # the epoch's training steps
    batch_size: int
    first: int = 0  # steps done before (a resumed epoch)
    log_every: int = 10  # read the metrics off the device every N steps
    checkpoint_every: int | None = None  # ... and where a checkpoint inside the epoch is due

    def reads_at(self, begin: int, end: int) -> bool:
        """Whether the call that took steps begin..end-1 (0-based) ends at a read."""
        due = [self.log_every] + ([self.checkpoint_every] if self.checkpoint_every else [])
        return end == self.steps or any(end // n > begin // n for n in due)


def blank_labels(net: keras.Model, rows: int) -> np.ndarray:
    """`rows` targets of 0s as `net`'s loss takes them (`target_spec`)."""
    shape, dtype = target_spec(net)
    return np.zeros((rows, *shape), dtype)


def train_epoch(net: keras.Model, feed: Feed, callbacks: keras.callbacks.CallbackList, figures: EpochFigures,
                plan: EpochPlan) -> EpochFigures:
    """Train steps plan.first..plan.steps-1, `figures` going on from a resumed epoch's; stops on `net.stop_training`."""
    net.make_train_function()
    try:
        return _train_steps(net, feed, callbacks, figures=figures, plan=plan)
    finally:
        feed.close()


def _train_steps(net, feed: Feed, callbacks, *, figures: EpochFigures, plan: EpochPlan) -> EpochFigures:
    step_calls = feed.calls(net, "train")
    # A resumed epoch's clock goes on from the seconds it had; the time before the resume
    # (process start, model load) is neither training nor waiting.
    clock = _Clock(figures, feed, step_calls)
    step = read_at = plan.first
    while step < plan.steps and not net.stop_training:
        stop_if_interrupted()
        end = min(step + net.steps_per_execution, plan.steps)
        callbacks.on_train_batch_begin(step)
        logs = step_calls()
        figures.steps, figures.images = end, figures.images + (end - step) * plan.batch_size
        read = {}
        if plan.reads_at(step, end):
            read, read_at = clock.read(logs), end
        callbacks.on_train_batch_end(end - 1, read)
        step = end
    if read_at != step:  # a callback stopped the epoch between reads
        clock.read(logs)
    step_calls.sync()
    return figures


class _Clock:
    """Reads an epoch's figures: Keras's running means (the one wait for the device), seconds and data wait."""

    def __init__(self, figures: EpochFigures, feed: Feed, step_calls):
        self.figures, self.feed, self.step_calls = figures, feed, step_calls
        self.started = time.perf_counter() - figures.seconds
        self.before = (figures.waited_s, figures.ring_wait_s, figures.copy_s, figures.copies)

    def read(self, logs: dict) -> dict:
        figures, feed = self.figures, self.feed
        figures.logs = self.step_calls.read(logs)
        figures.seconds = time.perf_counter() - self.started
        waited, ring, copied, copies = self.before
        figures.waited_s, figures.ring_wait_s = waited + feed.waited_s, ring + feed.ring_wait_s
        figures.copy_s, figures.copies = copied + feed.copies[0], copies + feed.copies[1]
        return {**figures.logs, "images_per_s": figures.images_per_s, "data_wait_fraction": figures.data_wait_fraction}


def validate(net: keras.Model, feed: Feed, callbacks: keras.callbacks.CallbackList) -> dict:
    """Keras's test step over every batch, the on_test_* hooks as `fit` fires them; metrics read once, at the end."""
    net.make_test_function()
    net.reset_metrics()
    try:
        return _test_steps(net, feed, callbacks)
    finally:
        feed.close()


def _test_steps(net, feed: Feed, callbacks) -> dict:
    step_calls = feed.calls(net, "test")
    callbacks.on_test_begin()
    step, logs = 0, {}
    while step < feed.count:
        stop_if_interrupted()
        end = min(step + net.steps_per_execution, feed.count)
        callbacks.on_test_batch_begin(step)
        logs = step_calls()
        if end == feed.count:
            logs = step_calls.read(logs)
        callbacks.on_test_batch_end(end - 1, logs if end == feed.count else {})
        step = end
    step_calls.sync()
    callbacks.on_test_end(logs)
    return logs


def build_step_variables(net: keras.Model) -> None:
    """Makes now the variables a compiled step would make on its first call (the loss's and the metrics', the
    optimizer's), eagerly on blank images: no trace, no weight changed, no random number drawn. TensorFlow traces a
    step again when its first trace made variables, a strategy's replicas cannot make them, and JAX's step takes them
    as state."""
    rows = 1
    if keras.backend.backend() == "jax" and keras.distribution.distribution() is not None:
        import jax

        rows = jax.local_device_count()
    x, y = np.zeros((rows, *net.input_shape[1:]), pixel_dtype(net)), blank_labels(net, rows)
    y_pred = net(x, training=False)
    net.compute_loss(x, y, y_pred, training=False)
    net.compute_metrics(x, y, y_pred, sample_weight=None)
    net.reset_metrics()
    if not net.optimizer.built:  # a LossScaleOptimizer that compile wrapped around a built one (mixed_float16)
        net.optimizer.build(net.trainable_variables)
