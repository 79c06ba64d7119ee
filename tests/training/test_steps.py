"""The step loop fed by the real enqueuer: how far ahead batches are built, and how many
batches exist outside the ring, counted from Keras callbacks around real training steps."""

from __future__ import annotations

import time
import weakref

import keras
import numpy as np
import pytest
from marked import IdentityAugmenter, MarkedSplit

from app.loader import prefetch
from app.loader.enqueuer import Enqueuer, Settings
from app.model import classifier
from app.training.steps import EpochFigures, evaluate, train_epoch

BATCH = 4


def tiny_net(size: int = 8) -> keras.Model:
    backbone = keras.Sequential([keras.Input((size, size, 3)), keras.layers.GlobalAveragePooling2D(),
                                 keras.layers.Dense(3, activation="softmax")])
    net = classifier(backbone, (size, size))
    net.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return net


def enqueuer(split, max_size: int) -> Enqueuer:
    return Enqueuer({"train": split}, {"train": IdentityAugmenter()},
                    Settings(BATCH, (split.size, split.size), workers=2, max_size=max_size))


class CountAhead(keras.callbacks.Callback):
    """After each training step: samples read at the source minus samples trained on."""

    def __init__(self, log):
        super().__init__()
        self.log, self.ahead, self.consumed = log, [], 0

    def on_train_batch_end(self, batch, logs=None):
        self.consumed += BATCH
        time.sleep(0.05)  # a slow step: the workers get every chance to run ahead
        self.ahead.append(len(self.log.read_text().splitlines()) - self.consumed)


@pytest.mark.parametrize("max_size", [1, 2, 10])
def test_built_ahead_never_exceeds_max_size(max_size, tmp_path):
    """Seed article 1's experiment: batches built vs batches consumed by training steps."""
    log = tmp_path / "reads.log"
    split = MarkedSplit(120, log_path=str(log))
    count = CountAhead(log)
    net = tiny_net()
    with enqueuer(split, max_size) as enq:
        figures = train_epoch(net, prefetch.batches(enq, "train", np.arange(120), 0),
                              keras.callbacks.CallbackList([count], model=net))
    assert figures.steps == 30 and figures.images == 120 and count.consumed == 120
    # the batch training has left the ring (it is float32 now): max_size batches more, no further
    assert max(count.ahead) <= max_size * BATCH
    # negative control: the workers do fill every slot they may
    assert max(count.ahead) == max_size * BATCH


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
        train_epoch(net, prefetch.batches(enq, "train", np.arange(80), 0),
                    keras.callbacks.CallbackList([Look()], model=net))
        assert 1 <= most[0] <= 2 and dtypes == {np.dtype(np.uint8)}
        # negative control: a consumer that keeps its batches is seen keeping them
        kept = list(prefetch.batches(enq, "train", np.arange(80), 1))
        assert live() == len(kept) == 20


def test_evaluate_weights_the_short_last_batch():
    net = tiny_net()
    with enqueuer(MarkedSplit(10), max_size=2) as enq:
        whole = evaluate(net, prefetch.batches(enq, "train", np.arange(10), 0))
        parts = [evaluate(net, prefetch.batches(enq, "train", np.arange(i, min(i + BATCH, 10)), 0))
                 for i in range(0, 10, BATCH)]
    assert whole.images == 10 and whole.steps == 3
    assert whole.loss == pytest.approx(sum(p.loss * p.images for p in parts) / 10, rel=1e-5)


def test_a_resumed_epoch_does_not_count_its_past_as_waiting():
    """Issue 10.11: the first wait after a mid-epoch resume counted the seconds already spent
    before the interruption (data_wait_fraction 1.336). A resumed epoch passes its old sums."""
    net = tiny_net()
    before = EpochFigures(steps=5, images=20, loss_sum=20.0, correct=10.0, waited_s=1.0, seconds=100.0)
    batches = [(np.zeros((BATCH, 8, 8, 3), np.uint8), np.zeros(BATCH, np.int64))] * 3
    figures = train_epoch(net, iter(batches), keras.callbacks.CallbackList([], model=net), before, first_batch=5)
    assert figures.steps == 8 and figures.seconds >= 100.0
    # the three new steps waited next to nothing: far below the 100 s already on the clock
    assert figures.waited_s < 1.0 + 50.0 and 0 <= figures.data_wait_fraction < 0.5
