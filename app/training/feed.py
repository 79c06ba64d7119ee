"""What a compiled step is fed: the loader's batches, the next one put on the step's device by a thread while the
step trains on this one (one ahead, no more: the copy off the step's path) or, under a tf.distribute strategy, by
tf.data's distributed iterator; the loader's wait, the copies, the step's own wait timed apart; the calls into Keras."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from functools import partial

import keras
import numpy as np

from app.adapters import JaxTrainerState
from app.model import pixel_dtype
from app.objectives import WeightedBinaryCrossentropy
from app.pixel_objectives import PixelLoss
from app.processes import signals_held
from app.targets import mask_dtype
from app.training import devices

_END = object()
STOP_WAIT_S = 5.0  # closing: how long the thread may take to see the stop (a copy under way finishes first)
POLL_S = 0.05  # how often a thread waiting on the step looks for a stop


class Ahead:
    """`batches` put on the device by `put` (resident when it returns), one ahead; then `finish`, once, by the last."""

    def __init__(self, batches: Iterator[tuple], put: Callable[[tuple], tuple], finish: Callable[[], None]):
        self.batches, self.put, self.finish = batches, put, finish
        self.copy_s = self.waited_s = 0.0  # the copies to the device; the step blocked waiting for one
        self.copies = 0
        self._handoff: queue.Queue = queue.Queue(maxsize=1)
        self._stop, self._taken, self._ended = threading.Event(), threading.Event(), threading.Lock()
        self._thread = threading.Thread(target=self._copy_ahead, name="app-device-ahead", daemon=True)
        self._thread.start()

    def _copy_ahead(self) -> None:
        last = _END
        try:
            while not self._stop.is_set():
                try:
                    batch = next(self.batches)
                except StopIteration:
                    break
                copying = time.perf_counter()
                on_device = self.put(batch)
                del batch  # the host copy freed (or kept by the device array that aliases it)
                self.copy_s += time.perf_counter() - copying
                self.copies += 1
                if not self._hand_over(on_device):  # the next copy starts once the step has this one
                    break
                del on_device
        except BaseException as error:  # noqa: BLE001 - raised again in the step's thread
            last = error
        if not self._stop.is_set():
            self._hand_over(last)
        self._end()

    def _hand_over(self, item) -> bool:
        """`item` to the step, returning once the step has taken it; False where the feed was closed meanwhile."""
        self._taken.clear()
        while True:
            try:
                self._handoff.put(item, timeout=POLL_S)
                break
            except queue.Full:
                if self._stop.is_set():
                    return False
        while not self._taken.wait(POLL_S):
            if self._stop.is_set():
                return False
        return True

    def _end(self) -> None:  # the second of the thread's end and `close` runs `finish`: once, out of the loader
        if not self._ended.acquire(blocking=False):
            self.finish()

    def __iter__(self) -> Iterator[tuple]:
        while True:
            asked = time.perf_counter()
            item = self._handoff.get()
            self.waited_s += time.perf_counter() - asked
            self._taken.set()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
            del item

    def close(self) -> None:
        """The thread stopped, its batch let go; `finish` now, or by the thread as it leaves the loader's batch."""
        self._stop.set()
        self._thread.join(timeout=STOP_WAIT_S)
        with contextlib.suppress(queue.Empty):
            self._handoff.get_nowait()  # a device batch nobody will take
        self._end()


class Feed:
    """`count` batches for the compiled step, their errors raised unchanged; `ring_wait_s`: blocked on the loader."""
    # whole_last: every process loads the last batch whole, replicated on every device

    def __init__(self, batches: Iterable[tuple], count: int, class_weights: np.ndarray | None = None, *,
                 whole_last: bool = False):
        self.batches, self.count, self.class_weights, self.whole_last = batches, count, class_weights, whole_last
        self.ring_wait_s = 0.0
        self.ahead: Ahead | None = None
        self.error: BaseException | None = None

    @property
    def waited_s(self) -> float:  # the step's wait: for the batch ahead on the device, else (tf.data) the loader's
        return self.ahead.waited_s if self.ahead is not None else self.ring_wait_s

    @property
    def copies(self) -> tuple[float, int]:  # (seconds copying to the device, batches); none where tf.data copies
        return (self.ahead.copy_s, self.ahead.copies) if self.ahead is not None else (0.0, 0)

    def on_device(self, put: Callable[[tuple], tuple]) -> Iterator[tuple]:
        """The batches as `put` places them on the device (resident when it returns), the next one ahead of the step."""
        self.ahead = Ahead(self._generate(), put, self._close_loader)
        return iter(self.ahead)

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
                self.ring_wait_s += time.perf_counter() - asked
            if np.ndim(y) < 3:  # a class a row, or (several) a 0/1 vector; a mask keeps its own integers
                y = np.asarray(y, np.int64 if np.ndim(y) == 1 else np.uint8)
            batch = [(x, y) if self.class_weights is None else (x, y, self.class_weights[y])]  # a weight a sample
            del x, y
            yield batch.pop()  # held by nothing here once handed over

    def calls(self, net: keras.Model, kind: str):
        """Calls into `net`'s compiled train or test step (`kind`) over these batches, as the backend takes them."""
        return (_JaxCalls if keras.backend.backend() == "jax" else _TensorFlowCalls)(net, self, kind)

    def close(self) -> None:
        """The copies ahead stopped, then the loader's side (the step stops at `count`: neither ends by itself)."""
        if self.ahead is not None:
            self.ahead.close()  # it closes the loader's side once its thread is out of it
        else:
            self._close_loader()

    def _close_loader(self) -> None:
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
        """One Keras train or test call; the loader's own error, if that is why it failed or ran short."""
        # a call of several steps over an iterator that ended early returns what it did
        try:
            logs = function(iterator)
        except Exception:
            if self.error is not None:
                raise self.error from None
            raise
        if self.error is not None:
            raise self.error
        return logs


class _TensorFlowCalls:
    """Keras's tf.function over an iterator of the feed (distributed under a strategy)."""

    def __init__(self, net: keras.Model, feed: Feed, kind: str):
        import tensorflow as tf  # not at the top: the JAX backend runs without it

        self.net, self.feed, self.calls = net, feed, 0
        self.function = net.train_function if kind == "train" else net.test_function
        self.distributed = tf.distribute.has_strategy()
        if not self.distributed:  # Keras steps a Python iterator of tensors batch by batch
            self.iterator = feed.on_device(partial(devices.on_tensorflow_device, devices.tensorflow_device(tf)))
            return
        # a stop raised inside TensorFlow's tracing (the dataset here, the step at its first call) breaks
        # its C++ callbacks ("MISMATCH of original and normalized active exception types"): it waits
        with signals_held():  # tf.data's distributed iterator copies the next batch to the replicas itself
            self.iterator = feed.iterator(tuple(net.input_shape[1:]), target_spec(net), pixel_dtype(net))

    def __call__(self) -> dict:
        # the first call traces the step, and the last may trace it again for a short last batch
        tracing = self.calls == 0 or (self.calls + 1) * self.net.steps_per_execution >= self.feed.count
        with signals_held() if tracing else nullcontext():
            logs = self.feed.call(self.function, self.iterator)
        self.calls += 1
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
        self.iterator = feed.on_device(devices.JaxPut(keras.distribution.distribution(), count=feed.count,
                                                      whole_last=feed.whole_last))
        self.state = JaxTrainerState(net, self.STATE[kind])

    def __call__(self) -> dict:
        return self.state.call(lambda state: self.feed.call(lambda it: self.function(state, it), self.iterator))

    def read(self, logs: dict) -> dict:
        """The metrics so far: a step's logs hold every device's counts (one global batch)."""
        return read(logs)

    def sync(self) -> None:
        self.net.jax_state_sync()


def target_spec(net: keras.Model) -> tuple[tuple, str]:
    """A row's target as `net`'s loss takes it, (shape, type): a class index, a 0/1 vector of classes, or a mask."""
    loss = getattr(net, "loss", None)
    if isinstance(loss, PixelLoss):
        return tuple(net.output_shape[1:3]), mask_dtype(loss.classes, loss.ignore_index)
    if isinstance(loss, WeightedBinaryCrossentropy):
        return (int(net.output_shape[-1]),), "uint8"
    return (), "int64"


def read(logs: dict) -> dict:
    """Keras's logs as floats (the one wait for the device), a metric's dict (each class's recall) flattened in."""
    out = {}
    for name, value in logs.items():
        if isinstance(value, dict):
            out.update(read(value))
        else:
            out[name] = float(value)
    return out
