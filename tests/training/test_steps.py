"""The step loop fed by the real enqueuer: how far ahead batches are built, how many batches
exist outside the ring, when metrics are read off the device, how many steps a call takes, and
what counts as waiting; counted from Keras callbacks around real training steps."""

from __future__ import annotations

import time
import weakref

import keras
import numpy as np
import pytest
from loaders import wait_until
from marked import IdentityAugmenter, MarkedSplit

from app.inference.scores import evaluate
from app.loader import prefetch
from app.loader.enqueuer import Enqueuer
from app.loader.settings import Queue, Settings
from app.model import classifier
from app.objectives import MeanAveragePrecision, WeightedBinaryCrossentropy
from app.training.steps import EpochFigures, EpochPlan, Feed, blank_labels, build_step_variables, train_epoch, validate

BATCH = 4


def tiny_net(size: int = 8, steps_per_execution: int = 1) -> keras.Model:
    backbone = keras.Sequential([keras.Input((size, size, 3)), keras.layers.GlobalAveragePooling2D(),
                                 keras.layers.Dense(3, activation="softmax")])
    net = classifier(backbone, (size, size))
    net.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                steps_per_execution=steps_per_execution)
    return net


def train(net, batches, count: int, callbacks=(), **plan) -> EpochFigures:
    return train_epoch(net, Feed(batches, count), keras.callbacks.CallbackList(list(callbacks), model=net),
                       EpochFigures(), EpochPlan(steps=count, batch_size=BATCH, **plan))


def blank_batches(count: int, size: int = 8):
    for _ in range(count):
        yield np.zeros((BATCH, size, size, 3), np.uint8), np.zeros(BATCH, np.int64)


def enqueuer(split, max_size: int) -> Enqueuer:
    return Enqueuer({"train": split}, {"train": IdentityAugmenter()},
                    Settings(batch_size=BATCH, image_size=(split.size, split.size),
                             queue=Queue(workers=2, max_size=max_size)))


class CountAhead(keras.callbacks.Callback):
    """After each training step: samples read at the source minus samples trained on."""

    def __init__(self, log, max_size):
        super().__init__()
        self.log, self.ahead, self.consumed, self.max_size = log, [], 0, max_size

    def on_train_batch_end(self, batch, logs=None):
        self.consumed += BATCH
        # a slow step: the workers fill every slot they may (more would show here or a step later)
        full = min(self.consumed + (self.max_size + 1) * BATCH, 120)
        assert wait_until(lambda: self.read() >= full), (self.consumed, self.read(), full)
        self.ahead.append(self.read() - self.consumed)

    def read(self) -> int:
        return len(self.log.read_text().splitlines())


@pytest.mark.parametrize("max_size", [1, 2, 10])
def test_built_ahead_never_exceeds_max_size(max_size, tmp_path):
    """Batches built vs batches consumed by training steps."""
    log = tmp_path / "reads.log"
    split = MarkedSplit(120, log_path=str(log))
    count = CountAhead(log, max_size)
    net = tiny_net()
    with enqueuer(split, max_size) as enq:
        figures = train(net, prefetch.batches(enq, "train", np.arange(120), 0), 30, [count])
    assert figures.steps == 30 and figures.images == 120 and count.consumed == 120
    # beside the batch training has left the ring, the next one is on the device ahead of the step: max_size
    # batches more than that, no further
    assert max(count.ahead) <= (max_size + 1) * BATCH
    # negative control: the workers do fill every slot they may
    assert max(count.ahead) == (max_size + 1) * BATCH


def test_at_most_two_batches_outside_the_ring_and_none_float32(monkeypatch):
    refs: list[weakref.ref] = []
    most = [0]
    dtypes = set()

    def live() -> int:
        return sum(r() is not None for r in refs)

    class Tracked(np.ndarray):
        pass

    real = prefetch.detach

    def tracked(images):
        out = real(images).view(Tracked)
        refs.append(weakref.ref(out))
        dtypes.add(out.dtype)
        most[0] = max(most[0], live())
        return out

    class Look(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            most[0] = max(most[0], live())

    monkeypatch.setattr(prefetch, "detach", tracked)
    net = tiny_net()
    with enqueuer(MarkedSplit(80), max_size=4) as enq:
        train(net, prefetch.batches(enq, "train", np.arange(80), 0), 20, [Look()])
        assert 1 <= most[0] <= 2 and dtypes == {np.dtype(np.uint8)}
        # negative control: a consumer that keeps its batches is seen keeping them
        kept = list(prefetch.batches(enq, "train", np.arange(80), 1))
        assert live() == len(kept) == 20


def test_evaluate_and_validate_weight_the_short_last_batch():
    net = tiny_net()
    with enqueuer(MarkedSplit(10), max_size=2) as enq:
        whole = evaluate(net, prefetch.batches(enq, "train", np.arange(10), 0))
        parts = [evaluate(net, prefetch.batches(enq, "train", np.arange(i, min(i + BATCH, 10)), 0))
                 for i in range(0, 10, BATCH)]
        hooks = Hooks()
        logs = validate(net, Feed(prefetch.batches(enq, "train", np.arange(10), 0), 3),
                        keras.callbacks.CallbackList([hooks], model=net))
    assert whole.images == 10 and [p.images for p in parts] == [4, 4, 2]
    assert whole.loss == pytest.approx(sum(p.loss * p.images for p in parts) / 10, rel=1e-5)
    # Keras's own test step scores the same samples the same way
    assert logs["loss"] == pytest.approx(whole.loss, rel=1e-5) and logs["accuracy"] == pytest.approx(whole.accuracy)
    assert hooks.calls == ["test_begin", "test_batch_begin 0", "test_batch_end 0 -", "test_batch_begin 1",
                           "test_batch_end 1 -", "test_batch_begin 2", "test_batch_end 2 accuracy,loss", "test_end"]


def test_a_resumed_epoch_does_not_count_its_past_as_waiting():
    """The first wait after a mid-epoch resume counted the seconds already spent
    before the interruption (data_wait_fraction 1.336). A resumed epoch passes its old figures."""
    net = tiny_net()
    before = EpochFigures(steps=5, images=20, waited_s=1.0, seconds=100.0)
    figures = train_epoch(net, Feed(blank_batches(3), 3), keras.callbacks.CallbackList([], model=net), before,
                          EpochPlan(steps=8, batch_size=BATCH, first=5))
    assert figures.steps == 8 and figures.images == 32 and figures.seconds >= 100.0
    # the three new steps waited next to nothing: far below the 100 s already on the clock
    assert figures.waited_s < 1.0 + 50.0 and 0 <= figures.data_wait_fraction < 0.5


class Hooks(keras.callbacks.Callback):
    """Every batch hook, with the keys of the logs it was given ("-" for none)."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def _end(self, name, batch, logs):
        self.calls.append(f"{name} {batch} {','.join(sorted(logs)) if logs else '-'}")

    def on_train_batch_begin(self, batch, logs=None):
        self.calls.append(f"train_batch_begin {batch}")

    def on_train_batch_end(self, batch, logs=None):
        self._end("train_batch_end", batch, logs)

    def on_test_begin(self, logs=None):
        self.calls.append("test_begin")

    def on_test_batch_begin(self, batch, logs=None):
        self.calls.append(f"test_batch_begin {batch}")

    def on_test_batch_end(self, batch, logs=None):
        self._end("test_batch_end", batch, logs)

    def on_test_end(self, logs=None):
        self.calls.append("test_end")


def test_metrics_are_read_every_log_every_steps_and_at_the_end():
    read = "accuracy,data_wait_fraction,images_per_s,loss"
    hooks = Hooks()
    train(tiny_net(), blank_batches(10), 10, [hooks], log_every=4)
    ends = [call for call in hooks.calls if call.startswith("train_batch_end")]
    assert ends == [f"train_batch_end {b} {read if b in (3, 7, 9) else '-'}" for b in range(10)]
    # negative control: reading every step gives every hook its logs
    hooks = Hooks()
    train(tiny_net(), blank_batches(10), 10, [hooks], log_every=1)
    assert all(call.endswith(read) for call in hooks.calls if call.startswith("train_batch_end"))


def test_several_steps_a_call_and_no_phantom_step():
    hooks, net = Hooks(), tiny_net(steps_per_execution=4)
    figures = train(net, blank_batches(10), 10, [hooks], log_every=4, checkpoint_every=8)
    assert [c for c in hooks.calls if "begin" in c] == ["train_batch_begin 0", "train_batch_begin 4",
                                                       "train_batch_begin 8"]
    assert [c.split()[1] for c in hooks.calls if "end" in c] == ["3", "7", "9"]
    # every batch trained once: the optimizer counted exactly ten steps
    assert int(net.optimizer.iterations) == 10 and figures.steps == 10 and figures.images == 40
    # negative control: one step a call fires the hooks each step
    hooks, net = Hooks(), tiny_net()
    train(net, blank_batches(10), 10, [hooks])
    assert len([c for c in hooks.calls if "begin" in c]) == 10 and int(net.optimizer.iterations) == 10


def slow_batches(count: int, seconds: float):
    for x, y in blank_batches(count):
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:  # a worker still decoding
            pass
        yield x, y


def test_data_wait_is_the_time_blocked_on_the_loader():
    net = tiny_net()
    train(net, blank_batches(2), 2)  # traced before the clocks below
    slow = train(net, slow_batches(10, 0.1), 10)
    # the loader's wait in full; the step's, at most that and the copies (less what the step overlapped of them)
    assert slow.ring_wait_s >= 10 * 0.1 and slow.waited_s <= slow.ring_wait_s + slow.copy_s + 0.05
    assert slow.data_wait_fraction > 0.5 and slow.ring_wait_fraction >= slow.data_wait_fraction
    # negative control: batches that are ready at once leave little to wait for
    fast = train(net, blank_batches(10), 10)
    assert fast.waited_s < 0.25 and fast.data_wait_fraction < slow.data_wait_fraction


def test_the_loaders_own_error_reaches_the_loop_unchanged():
    class LoaderFailed(RuntimeError):
        pass

    def failing():
        yield from blank_batches(2)
        raise LoaderFailed("sample 7 could not be decoded")

    with pytest.raises(LoaderFailed, match="sample 7"):
        train(tiny_net(), failing(), 5)


def test_the_train_step_is_traced_once_when_its_variables_are_made_before():
    """TensorFlow traces a step a second time when its first trace made variables (the metrics', the optimizer's):
    seconds for a large model's first step."""
    traces = {}
    for made_before in (True, False):  # False: the negative control
        net = tiny_net()
        weights = [np.array(w) for w in net.weights]
        if made_before:
            build_step_variables(net)
            assert all(np.array_equal(w, np.array(v)) for w, v in zip(weights, net.weights, strict=False))  # unchanged
        step, count = net.train_step, []

        def counted(*args, step=step, count=count):
            count.append(1)
            return step(*args)

        net.train_step = counted
        train(net, blank_batches(2), 2)
        traces[made_before] = len(count)
    assert traces == {True: 1, False: 2}


def test_a_multilabel_models_metrics_are_built_on_label_rows_and_validate_reads_them():
    backbone = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.GlobalAveragePooling2D(),
                                 keras.layers.Dense(3, activation="sigmoid")])
    net = classifier(backbone, (8, 8))
    net.compile(optimizer="sgd", loss=WeightedBinaryCrossentropy(), metrics=[MeanAveragePrecision(3)])
    assert blank_labels(net, 2).shape == (2, 3) and blank_labels(tiny_net(), 2).shape == (2,)  # negative control
    build_step_variables(net)  # as a resume restoring its metrics, or JAX and a strategy, build them first
    rows = np.array([[1, 0, 1], [0, 0, 0], [0, 1, 1], [1, 1, 0]], np.uint8)
    feed = Feed([(np.zeros((4, 8, 8, 3), np.uint8), rows)], 1)
    logs = validate(net, feed, keras.callbacks.CallbackList([], model=net))
    assert {"loss", "map"} <= set(logs) and 0 < float(logs["map"]) <= 1
