"""A Keras callback that writes down every hook it sees, for tests that compare the trainer's
step loop with `fit`. Importable by the `train` CLI in a subprocess (tests/ on PYTHONPATH)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import keras

UNINDEXED = {"train_begin", "train_end", "test_begin", "test_end"}
HOOKS = ["train_begin", "epoch_begin", "train_batch_begin", "train_batch_end", "test_begin", "test_batch_begin",
         "test_batch_end", "test_end", "epoch_end", "train_end"]


class HookRecorder(keras.callbacks.Callback):
    """One JSON line a hook: [hook, its epoch or batch index, the keys of its logs]."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def _write(self, hook: str, index, logs) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps([hook, index, sorted(logs or {})]) + "\n")


def _hook(name: str, indexed: bool):
    if indexed:
        return lambda self, index, logs=None: self._write(name, index, logs)
    return lambda self, logs=None: self._write(name, None, logs)


for _name in HOOKS:
    setattr(HookRecorder, f"on_{_name}", _hook(_name, _name not in UNINDEXED))


def read(path) -> list[list]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


class LearningRates(keras.callbacks.Callback):
    """After each call into the training step: the optimizer's step count and learning rate."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def on_train_batch_end(self, batch, logs=None):
        optimizer = self.model.optimizer
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{int(optimizer.iterations)} {float(optimizer.learning_rate)!r}\n")


def rates(path) -> dict[int, str]:
    """Step → learning rate; a step written twice (redone after a resume) must agree."""
    seen: dict[int, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            step, rate = line.split()
            assert seen.setdefault(int(step), rate) == rate, (step, seen[int(step)], rate)
    return seen


class StepInputs(keras.callbacks.Callback):
    """Writes the dtype of the images each training step is traced with, as the step receives
    them (TensorFlow calls train_step(data), JAX train_step(state, data))."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def on_train_begin(self, logs=None):
        model, step = self.model, self.model.train_step

        def recorded(*args):
            images = args[-1][0]
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(keras.backend.standardize_dtype(images.dtype) + "\n")
            return step(*args)

        model.train_step = recorded
        model.make_train_function(force=True)


class KillOnce(keras.callbacks.Callback):
    """SIGKILLs its own process as training batch `batch` of epoch `epoch` begins (0-based), as a
    pre-emption would, unless `path` exists; it writes `path` first, so the resumed run goes on."""

    def __init__(self, path: str, epoch: int, batch: int):
        super().__init__()
        self.path, self.at, self.epoch = Path(path), (epoch, batch), 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if (self.epoch, batch) == self.at and not self.path.exists():
            self.path.write_text("killed\n", encoding="utf-8")
            os.kill(os.getpid(), signal.SIGKILL)
