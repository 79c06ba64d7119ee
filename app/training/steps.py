"""The step loop: uint8 batches → Keras's compiled train and test functions, steps_per_execution steps a call, the
callbacks fired as `fit` fires them, logs empty between metric reads (why not `fit`'s: docs/architecture.md)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass

import keras
import numpy as np

from app.adapters import JaxTrainerState
from app.model import pixel_dtype
from app.objectives import WeightedBinaryCrossentropy
from app.pixel_objectives import PixelLoss
from app.processes import signals_held, stop_if_interrupted
from app.runs.checkpoint import EpochFigures, RunState
from app.targets import mask_dtype

__all__ = ["EpochFigures", "EpochPlan", "Feed", "RunState", "train_epoch", "validate"]


class Feed:
    """`count` batches handed to the compiled step unbuffered, `waited_s` the seconds blocked on them; the iterator's
    errors raised unchanged. `whole_last`: every process loads the last batch whole, replicated on every device."""

    def __init__(self, batches: Iterable[tuple], count: int, class_weights: np.ndarray | None = None, *,
                 whole_last: bool = False):
        self.batches, self.count, self.class_weights, self.whole_last = batches, count, class_weights, whole_last
        self.waited_s = 0.0
        self.error: BaseException | None = None

    def _generate(self) -> Iterator[tuple]:
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
            if np.ndim(y) < 3:  # a class a row, or (several) a 0/1 vector; a mask keeps its own integers
                y = np.asarray(y, np.int64 if np.ndim(y) == 1 else np.uint8)
            batch = [(x, y) if self.class_weights is None else (x, y, self.class_weights[y])]  # a weight a sample
            del x, y
            yield batch.pop()  # held by nothing here once handed over

    def calls(self, net: keras.Model, kind: str):
        """Calls into `net`'s compiled train or test step (`kind`) over these batches, as the backend takes them."""
        return (_JaxCalls if keras.backend.backend() == "jax" else _TensorFlowCalls)(net, self, kind)

    def close(self) -> None:
        """The loader's side closed: tf.data stops at `count` batches, so it never exhausts the source."""
        close = getattr(self.batches, "close", None)
        if close:
            close()

    def iterator(self, image_shape, targets: tuple = ((), "int64"), dtype: str = "uint8") -> Iterator:
        """tf.data over the batches; `targets`: a batch row's target shape and type (`target_spec`)."""
        import tensorflow as tf

        labels = tf.TensorSpec((None, *targets[0]), tf.as_dtype(targets[1]))
        signature = (tf.TensorSpec((None, *image_shape), tf.as_dtype(dtype)), labels)
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


class _TensorFlowCalls:
    """Keras's tf.function over an iterator of the feed (distributed under a strategy)."""

    def __init__(self, net: keras.Model, feed: Feed, kind: str):
        import tensorflow as tf  # not at the top: the JAX backend runs without it

        self.net, self.feed, self.traced = net, feed, False
        self.function = net.train_function if kind == "train" else net.test_function
        # a stop raised inside TensorFlow's tracing (the dataset here, the step at its first call) breaks
        # its C++ callbacks ("MISMATCH of original and normalized active exception types"): it waits
        with signals_held():
            self.iterator = feed.iterator(tuple(net.input_shape[1:]), target_spec(net), pixel_dtype(net))
            self.distributed = tf.distribute.has_strategy()

    def __call__(self) -> dict:
        with nullcontext() if self.traced else signals_held():
            logs = self.feed.call(self.function, self.iterator)
        self.traced = True
        return logs

    def read(self, logs: dict) -> dict:
        """The metrics so far; under a strategy read off the metric variables, which pool every replica's counts (a
        step's logs average the replicas' ratios, wrong for unequal shares)."""
        return read(self.net.get_metrics_result() if self.distributed else logs)

    def sync(self) -> None:
        """The model's variables are the step's own: nothing to write back."""


class _JaxCalls:
    """JAX's compiled steps: pure functions of the model's state, which goes back into the model when it is read."""

    STATE = {"train": ("trainable_variables", "non_trainable_variables", "optimizer_variables", "metrics_variables"),
             "test": ("trainable_variables", "non_trainable_variables", "metrics_variables")}

    def __init__(self, net: keras.Model, feed: Feed, kind: str):
        self.net, self.feed = net, feed
        self.function = net.train_function if kind == "train" else net.test_function
        self.iterator = (_on_devices(batch, whole=feed.whole_last and i == feed.count - 1)
                         for i, batch in enumerate(feed._generate()))
        self.state = JaxTrainerState(net, self.STATE[kind])

    def __call__(self) -> dict:
        return self.state.call(lambda state: self.feed.call(lambda it: self.function(state, it), self.iterator))

    def read(self, logs: dict) -> dict:
        """The metrics so far: a step's logs hold every device's counts (one global batch)."""
        return read(logs)

    def sync(self) -> None:
        self.net.jax_state_sync()


def _on_devices(batch: tuple, whole: bool = False) -> tuple:
    """A batch as JAX arrays: this process's rows spread over keras.distribution's devices (`whole`: on every one)."""
    import jax

    distribution = keras.distribution.distribution()
    if distribution is None:
        return tuple(jax.device_put(a) for a in batch)

    def layout(a):
        if whole:
            return keras.distribution.TensorLayout([None] * a.ndim, distribution.device_mesh).backend_layout
        return distribution.get_data_layout(a.shape).backend_layout

    return tuple(jax.make_array_from_process_local_data(layout(a), a) for a in batch)


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


def target_spec(net: keras.Model) -> tuple[tuple, str]:
    """A row's target as `net`'s loss takes it, (shape, type): a class index, a 0/1 vector of classes, or a mask."""
    loss = getattr(net, "loss", None)
    if isinstance(loss, PixelLoss):
        return tuple(net.output_shape[1:3]), mask_dtype(loss.classes, loss.ignore_index)
    if isinstance(loss, WeightedBinaryCrossentropy):
        return (int(net.output_shape[-1]),), "uint8"
    return (), "int64"


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
        self.started, self.waited_before = time.perf_counter() - figures.seconds, figures.waited_s

    def read(self, logs: dict) -> dict:
        figures = self.figures
        figures.logs = self.step_calls.read(logs)
        figures.seconds = time.perf_counter() - self.started
        figures.waited_s = self.waited_before + self.feed.waited_s
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


def read(logs: dict) -> dict:
    """Keras's logs as floats (the one wait for the device), a metric's dict (each class's recall) flattened in."""
    out = {}
    for name, value in logs.items():
        if isinstance(value, dict):
            out.update(read(value))
        else:
            out[name] = float(value)
    return out


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
