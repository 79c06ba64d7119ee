"""app/training/feed.py in the step loop: batch n+1 is on the step's device before step n returns (TensorFlow here,
JAX in a process of its own), its copy and the step's wait timed apart from the loader's; the loader's error and an
early stop handled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import keras
import numpy as np
import pytest

from app.model import classifier
from app.training import feed as feed_module
from app.training.feed import Ahead
from app.training.steps import EpochFigures, EpochPlan, Feed, build_step_variables, train_epoch

ROOT = Path(__file__).resolve().parents[2]
BATCH, STEPS = 4, 5


class Watched(Feed):
    """A feed that notes each batch put on the device; `ahead=False`: put as the step asks, none ahead (the control)."""

    def __init__(self, *args, ahead: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.placed, self.changed, self.keep_ahead = [], threading.Condition(), ahead

    def on_device(self, put):
        def noted(batch):
            placed = put(batch)
            with self.changed:
                self.placed.append(placed)
                self.changed.notify_all()
            return placed

        return super().on_device(noted) if self.keep_ahead else map(noted, self._generate())

    def wait_for(self, count: int, timeout_s: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: len(self.placed) >= count, timeout_s)


def steps_with_the_next_batch_placed(ahead: bool = True, timeout_s: float = 10.0) -> dict:
    """Trains STEPS steps; each step, once returned, waits (up to `timeout_s`) for the next batch to be on the device
    before the loop may go on: whether it was, each step, and where the batches were put."""
    backbone = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.GlobalAveragePooling2D(),
                                 keras.layers.Dense(3, activation="softmax")])
    net = classifier(backbone, (8, 8))
    net.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    build_step_variables(net)  # as `train` has them (JAX's step takes them as state)
    net.make_train_function()
    batches = [(np.full((BATCH, 8, 8, 3), i, np.uint8), np.zeros(BATCH, np.int64)) for i in range(STEPS)]
    feed, returned, placed_before = Watched(iter(batches), STEPS, ahead=ahead), [0], []
    step = net.train_function

    def step_then_look(*args):
        logs = step(*args)
        returned[0] += 1
        if returned[0] < STEPS:  # still inside step n's call: is batch n+1 on the device already?
            placed_before.append(feed.wait_for(returned[0] + 1, timeout_s))
        return logs

    net.train_function = step_then_look
    callbacks = keras.callbacks.CallbackList([], model=net)
    callbacks.on_train_begin()  # as `train` starts them (JAX's list dispatches its hooks from a pool made here)
    figures = train_epoch(net, feed, callbacks, EpochFigures(), EpochPlan(steps=STEPS, batch_size=BATCH))
    callbacks.on_train_end()
    first = feed.placed[0][0]
    return {"placed_before": placed_before, "kind": type(first).__module__.split(".")[0],
            "device": str(getattr(first, "device", None) or first.devices()),
            "copies": figures.copies, "copy_s": figures.copy_s, "waited_s": figures.waited_s,
            "values": [int(np.asarray(x)[0, 0, 0, 0]) for x, _ in feed.placed]}


def test_tensorflow_has_the_next_batch_on_its_device_before_a_step_returns():
    seen = steps_with_the_next_batch_placed()
    assert seen["placed_before"] == [True] * (STEPS - 1)
    assert seen["kind"] == "tensorflow" and "CPU:0" in seen["device"]  # a tensor on the step's device
    assert seen["values"] == list(range(STEPS)) and seen["copies"] == STEPS and seen["copy_s"] > 0
    # negative control: put as the step asks for it, the next batch is never there before the step returns
    assert steps_with_the_next_batch_placed(ahead=False, timeout_s=0.2)["placed_before"] == [False] * (STEPS - 1)


def test_jax_has_the_next_batch_on_its_device_before_a_step_returns():
    script = ("import json, sys; sys.path.insert(0, 'tests/training'); import test_feed; "
              "print(json.dumps(test_feed.steps_with_the_next_batch_placed()))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "KERAS_BACKEND": "jax"})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["placed_before"] == [True] * (STEPS - 1)
    assert seen["kind"] == "jaxlib" or seen["kind"] == "jax", seen
    assert "cpu" in seen["device"].lower() and seen["values"] == list(range(STEPS)) and seen["copies"] == STEPS


def test_the_loaders_error_reaches_the_step_and_an_early_stop_ends_the_thread():
    def failing():
        yield 1,
        raise RuntimeError("sample 7 could not be decoded")

    finished = []
    ahead = Ahead(failing(), lambda batch: batch, lambda: finished.append("closed"))
    with pytest.raises(RuntimeError, match="sample 7"):
        list(ahead)
    ahead.close()
    endless = Ahead(iter(lambda: (0,), None), lambda batch: batch, lambda: finished.append("closed"))
    assert next(iter(endless)) == (0,)
    endless.close()  # stopped while a batch waits for the step: the thread ends, the loader's side is closed
    assert finished == ["closed", "closed"] and not endless._thread.is_alive()


def test_a_thread_inside_the_loader_at_close_closes_the_loaders_side_itself_once_out(monkeypatch):
    monkeypatch.setattr(feed_module, "STOP_WAIT_S", 0.05)
    inside, release, finished = threading.Event(), threading.Event(), []

    def slow():
        yield 0,
        inside.set()
        assert release.wait(10), "never released"
        yield 1,

    ahead = Ahead(slow(), lambda batch: batch, lambda: finished.append(threading.current_thread().name))
    assert next(iter(ahead)) == (0,) and inside.wait(10)
    ahead.close()  # the thread is inside the loader: it cannot close its side yet
    assert finished == []
    release.set()
    ahead._thread.join(10)
    assert not ahead._thread.is_alive() and finished == ["app-device-ahead"]  # once, by the thread


@pytest.mark.parametrize("steps_per_execution", [1, 4])
def test_a_loader_error_inside_a_call_of_several_steps_is_raised(steps_per_execution):
    """A call of several steps over an iterator that ends early returns what it did: the loader's error must not
    be lost there (negative control: the same batches without the error train all 8 steps)."""
    def batches(fail_at: int | None):
        for i in range(8):
            if i == fail_at:
                raise RuntimeError(f"sample {4 * i} of the train split could not be loaded")
            yield np.zeros((BATCH, 8, 8, 3), np.uint8), np.zeros(BATCH, np.int64)

    def train(fail_at):
        backbone = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.GlobalAveragePooling2D(),
                                     keras.layers.Dense(3, activation="softmax")])
        net = classifier(backbone, (8, 8))
        net.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", steps_per_execution=steps_per_execution)
        build_step_variables(net)
        return train_epoch(net, Feed(batches(fail_at), 8), keras.callbacks.CallbackList([], model=net),
                           EpochFigures(), EpochPlan(steps=8, batch_size=BATCH))

    with pytest.raises(RuntimeError, match="sample 24 of the train split"):
        train(6)
    assert train(None).steps == 8
