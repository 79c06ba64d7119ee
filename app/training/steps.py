"""The step loop: the loader's uint8 batches → a tf.data pipeline that buffers nothing → Keras's
compiled train and test functions, `trainer.steps_per_execution` steps a call, the callbacks
around each call as `fit` fires them.

Metrics stay on the device between reads: every `trainer.log_every_steps`, at a checkpoint and
at the epoch's end. Between reads the batch hooks fire with empty logs, so nothing waits for
the device. The loop is ours rather than `fit`'s because a resumed run starts inside an epoch,
with Keras's running metrics and the callbacks' counters restored, which `fit` cannot do.
Never imports the loader: batches come as arrays.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import keras
import numpy as np

from app.training.checkpoint import EpochFigures, RunState
from app.training.objectives import EPSILON

__all__ = ["EpochFigures", "EpochPlan", "Feed", "RunState", "evaluate", "train_epoch", "validate"]


class Feed:
    """`count` batches from an iterator, as a tf.data dataset with no buffer of its own: the
    seconds spent blocked waiting for them, and an error the iterator raised, kept to be raised
    unchanged in the loop (tf.data would turn it into a TensorFlow error)."""

    def __init__(self, batches: Iterable[tuple[np.ndarray, np.ndarray]], count: int,
                 class_weights: np.ndarray | None = None):
        self.batches, self.count, self.class_weights = batches, count, class_weights
        self.waited_s = 0.0
        self.error: BaseException | None = None

    def _generate(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        source = iter(self.batches)
        while True:
            asked = time.perf_counter()
            try:
                x, y = next(source)
            except StopIteration:
                return
            except BaseException as error:  # noqa: BLE001 - raised again by `call`
                self.error = error
                return
            finally:
                self.waited_s += time.perf_counter() - asked
            y = np.asarray(y, np.int64)
            batch = [(x, y) if self.class_weights is None else (x, y, self.class_weights[y])]  # a weight a sample
            del x, y
            yield batch.pop()  # held by nothing here once handed over

    def close(self) -> None:
        """The loader's side of the feed ends (the copy-ahead thread, the enqueuer's pass): tf.data
        never asks for more than `count` batches, so the source is not exhausted by itself."""
        close = getattr(self.batches, "close", None)
        if close:
            close()

    def iterator(self, image_size) -> Iterator:
        import tensorflow as tf

        signature = (tf.TensorSpec((None, *image_size, 3), tf.uint8), tf.TensorSpec((None,), tf.int64))
        if self.class_weights is not None:
            signature += (tf.TensorSpec((None,), tf.float32),)
        dataset = tf.data.Dataset.from_generator(self._generate, output_signature=signature)
        # without the cardinality, Keras's optimizer counts a phantom step at the end
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(self.count))
        options = tf.data.Options()
        options.autotune.enabled = False  # no prefetch buffer: the ring is the only queue
        dataset = dataset.with_options(options)
        if tf.distribute.has_strategy():  # each batch split across the replicas (app/training/devices.py)
            return iter(tf.distribute.get_strategy().experimental_distribute_dataset(dataset))
        return iter(dataset)

    def call(self, function, iterator):
        """One Keras train or test call; the loader's own error, if that is why it failed."""
        try:
            return function(iterator)
        except Exception:
            if self.error is not None:
                raise self.error from None
            raise


@dataclass
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


def _image_size(net: keras.Model) -> tuple[int, int]:
    return tuple(net.input_shape[1:3])


def train_epoch(net: keras.Model, feed: Feed, callbacks: keras.callbacks.CallbackList, figures: EpochFigures,
                plan: EpochPlan) -> EpochFigures:
    """Train steps plan.first..plan.steps-1; `figures` go on from what a resumed epoch had.
    Stops early when a callback sets `net.stop_training`."""
    net.make_train_function()
    try:
        return _train_steps(net, feed, callbacks, figures, plan)
    finally:
        feed.close()


def _train_steps(net, feed: Feed, callbacks, figures: EpochFigures, plan: EpochPlan) -> EpochFigures:
    iterator = feed.iterator(_image_size(net))
    # A resumed epoch's clock goes on from the seconds it had; the time before the resume
    # (process start, model load) is neither training nor waiting.
    clock = _Clock(figures, feed)
    step = read_at = plan.first
    while step < plan.steps and not net.stop_training:
        end = min(step + net.steps_per_execution, plan.steps)
        callbacks.on_train_batch_begin(step)
        logs = feed.call(net.train_function, iterator)
        figures.steps, figures.images = end, figures.images + (end - step) * plan.batch_size
        read = {}
        if plan.reads_at(step, end):
            read, read_at = clock.read(logs), end
        callbacks.on_train_batch_end(end - 1, read)
        step = end
    if read_at != step:  # a callback stopped the epoch between reads
        clock.read(logs)
    return figures


class _Clock:
    """Reads an epoch's figures: Keras's running means (the one wait for the device), the
    seconds since the epoch began and those spent blocked on the ring."""

    def __init__(self, figures: EpochFigures, feed: Feed):
        self.figures, self.feed = figures, feed
        self.started, self.waited_before = time.perf_counter() - figures.seconds, figures.waited_s

    def read(self, logs: dict) -> dict:
        figures = self.figures
        figures.logs = read(logs)
        figures.seconds = time.perf_counter() - self.started
        figures.waited_s = self.waited_before + self.feed.waited_s
        return {**figures.logs, "images_per_s": figures.images_per_s, "data_wait_fraction": figures.data_wait_fraction}


def validate(net: keras.Model, feed: Feed, callbacks: keras.callbacks.CallbackList) -> dict:
    """Keras's test step over every batch (the last may be short), the on_test_* hooks around
    it as `fit` fires them; the metrics read once, at the end."""
    net.make_test_function()
    net.reset_metrics()
    try:
        return _test_steps(net, feed, callbacks)
    finally:
        feed.close()


def _test_steps(net, feed: Feed, callbacks) -> dict:
    iterator = feed.iterator(_image_size(net))
    callbacks.on_test_begin()
    step, logs = 0, {}
    while step < feed.count:
        end = min(step + net.steps_per_execution, feed.count)
        callbacks.on_test_batch_begin(step)
        logs = feed.call(net.test_function, iterator)
        if end == feed.count:
            logs = read(logs)
        callbacks.on_test_batch_end(end - 1, logs if end == feed.count else {})
        step = end
    callbacks.on_test_end(logs)
    return logs


def read(logs: dict) -> dict:
    """Keras's logs as floats (the one wait for the device), a metric's dict of values (each
    class's recall) flattened into them."""
    out = {}
    for name, value in logs.items():
        if isinstance(value, dict):
            out.update(read(value))
        else:
            out[name] = float(value)
    return out


def build_metrics(net: keras.Model) -> None:
    """Keras builds a compiled model's metrics on its first step; an inference step on one blank
    image builds them now (it changes no weight and draws no random number). Under a strategy
    the first training step runs in each replica, where no variable may be created."""
    height, width = _image_size(net)
    net.test_on_batch(np.zeros((1, height, width, 3), np.uint8), np.zeros((1,), np.int64))
    net.reset_metrics()


def restore_metrics(net: keras.Model, saved: dict) -> None:
    """Keras's metric variables as a checkpoint inside an epoch saved them (a loaded model has
    not built them yet)."""
    build_metrics(net)
    for variable in net.metrics_variables:
        variable.assign(np.asarray(saved[variable.path], variable.dtype))


def metric_state(net: keras.Model) -> dict:
    return {variable.path: np.asarray(variable).tolist() for variable in net.metrics_variables}


@dataclass
class Scores:
    images: int = 0
    loss_sum: float = 0.0
    correct: int = 0
    top_k_correct: int = 0
    # the most confident mistakes: (probability of the wrong class, position in the split, true, predicted)
    mistakes: list = field(default_factory=list)

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.images, 1)

    @property
    def accuracy(self) -> float:
        return self.correct / max(self.images, 1)

    def add_mistakes(self, p: np.ndarray, y: np.ndarray, predicted: np.ndarray, keep: int = 16) -> None:
        for i in np.flatnonzero(predicted != y):
            self.mistakes.append((float(p[i, predicted[i]]), self.images + int(i), int(y[i]), int(predicted[i])))
        self.mistakes = sorted(self.mistakes, reverse=True)[:keep]


def evaluate(net: keras.Model, batches: Iterable[tuple[np.ndarray, np.ndarray]],
             confusion: np.ndarray | None = None, top_k: int | None = None) -> Scores:
    """The `evaluate` command's scores: loss and accuracy over every batch, from one forward
    pass a batch, scored as Keras's sparse categorical crossentropy and accuracy score them;
    top-k accuracy, and the most confident mistakes. With `confusion` (classes × classes), each
    sample is counted into it too."""
    scores = Scores()
    for x, y in batches:
        p = np.asarray(net.predict_on_batch(x), np.float64)
        p /= p.sum(axis=1, keepdims=True)
        picked = np.clip(p[np.arange(len(y)), y], EPSILON, 1 - EPSILON)
        predicted = p.argmax(axis=1)
        if top_k:
            scores.top_k_correct += int((np.argsort(-p, axis=1)[:, :top_k] == y[:, None]).any(axis=1).sum())
        scores.add_mistakes(p, y, predicted)
        scores.images += len(y)
        scores.loss_sum += float(-np.log(picked).sum())
        scores.correct += int((predicted == y).sum())
        if confusion is not None:
            np.add.at(confusion, (y, predicted), 1)
    return scores
