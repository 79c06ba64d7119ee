"""The trainer's own Keras callbacks, and what a checkpoint keeps of the user's (`trainer.callbacks`)."""

from __future__ import annotations

import inspect
import logging
import sys
from pathlib import Path

import keras
import numpy as np
from tqdm import tqdm

from app.frameworks import load_tensorflow
from app.io import open_own
from app.loader.order import draws_of
from app.runs.checkpoint import RunState

log = logging.getLogger("app.train")
VALIDATION_BAR_AFTER_S = 2


class Progress(keras.callbacks.Callback):
    """A bar an epoch; the running loss, accuracy and images/s each time they are read."""

    def __init__(self, epochs: int, steps: int, shown: str = "accuracy"):
        """`shown`: the figure beside the loss, the task's (accuracy, auc, miou)."""
        super().__init__()
        self.epochs, self.steps, self.shown = epochs, steps, shown
        self.bar = self.validation = None

    def on_epoch_begin(self, epoch, logs=None):
        self.bar = tqdm(total=self.steps, initial=int((logs or {}).get("first_batch", 0)), unit="step",
                        desc=f"epoch {epoch + 1}/{self.epochs}", file=sys.stderr, mininterval=0.5,
                        dynamic_ncols=True)

    def on_train_batch_end(self, batch, logs=None):
        self.bar.update(batch + 1 - self.bar.n)
        if logs:
            score = {self.shown: f"{logs[self.shown]:.3f}"} if self.shown in logs else {}
            self.bar.set_postfix(loss=f"{logs['loss']:.4f}", **score, img_s=f"{logs['images_per_s']:.0f}",
                                 refresh=False)
        if batch + 1 >= self.steps:  # closed before validation, so the epoch's log line follows it
            self.bar.close()

    def on_train_end(self, logs=None):
        self.close()

    def close(self) -> None:  # a run that fails prints its error below the bars' last lines, not above them
        for bar in (self.bar, self.validation):
            if bar is not None:
                bar.close()

    def on_test_begin(self, logs=None):  # a grid of patches can make validation minutes long: a bar once it is slow
        self.validation = tqdm(unit="step", desc="validation", file=sys.stderr, delay=VALIDATION_BAR_AFTER_S,
                               mininterval=0.5, leave=False, dynamic_ncols=True)

    def on_test_batch_end(self, batch, logs=None):
        self.validation.update(batch + 1 - self.validation.n)

    def on_test_end(self, logs=None):
        self.validation.close()


class Profile(keras.callbacks.Callback):
    """`trainer.profile_steps`: the backend's profiler on global steps [first, last] into `logdir`/plugins/profile/."""

    def __init__(self, steps: list[int], logdir: Path, state: RunState):
        super().__init__()
        if keras.backend.backend() == "jax":
            import jax

            self.start, self.stop = jax.profiler.start_trace, jax.profiler.stop_trace
            self.step = lambda step: jax.profiler.StepTraceAnnotation("train", step_num=step)
        else:
            profiler = load_tensorflow().profiler.experimental
            self.start, self.stop = profiler.start, profiler.stop
            self.step = lambda step: profiler.Trace("train", step_num=step, _r=1)
        self.first, self.last = steps
        self.logdir, self.state = str(logdir), state
        self.running, self.trace = False, None

    def on_train_batch_begin(self, batch, logs=None):
        step = self.state.steps_before_epoch + batch + 1
        if not self.running and self.first <= step <= self.last:
            self.start(self.logdir)
            self.running = True
        if self.running:
            self.trace = self.step(step)
            self.trace.__enter__()

    def on_train_batch_end(self, batch, logs=None):
        if self.trace is not None:
            self.trace.__exit__(None, None, None)
            self.trace = None
        if self.running and self.state.steps_before_epoch + batch + 1 >= self.last:
            self._stop()

    def on_train_end(self, logs=None):
        if self.running:  # the run stopped inside the window
            self._stop()

    def _stop(self) -> None:
        self.stop()
        self.running = False
        log.info("profiler: steps %d to %d traced into %s (TensorBoard's Profile tab)", self.first, self.last,
                 self.logdir)


class StepCheckpoint(keras.callbacks.Callback):
    """`save(steps into epoch)` each `trainer.checkpoint_every_steps` but at epoch ends; last, to save others' state."""

    def __init__(self, every: int, steps_per_epoch: int, save):
        super().__init__()
        self.every, self.steps_per_epoch, self.save = every, steps_per_epoch, save

    def on_train_batch_end(self, batch, logs=None):
        done = batch + 1
        if done % self.every == 0 and done != self.steps_per_epoch:  # the epoch's end saves its own
            self.save(done)


class SampleRecorder(keras.callbacks.Callback):
    """`trainer.record_samples`: samples.csv, each step's sample indices; with patches, places (`where`: image:x:y)."""

    def __init__(self, path: Path, batch_size: int, state: RunState, where=None):
        super().__init__()
        self.path, self.batch_size, self.state, self.where = path, batch_size, state, where
        self.first = 0

    def on_train_batch_begin(self, batch, logs=None):
        self.first = batch

    def on_train_batch_end(self, batch, logs=None):
        new = not self.path.exists()
        draws = draws_of(self.state.order) if self.where else None
        with open_own(self.path, "a", encoding="utf-8") as f:
            if new:
                f.write("step,epoch,batch,indices" + (",patches\n" if self.where else "\n"))
            for step in range(self.first, batch + 1):  # each step of the call
                taken = slice(step * self.batch_size, (step + 1) * self.batch_size)
                indices = self.state.order[taken]
                f.write(f"{self.state.steps_before_epoch + step + 1},{self.state.epoch + 1},{step},"
                        f"{' '.join(map(str, indices))}")
                if self.where:
                    f.write("," + " ".join(self.where(int(i), self.state.epoch, int(d))
                                           for i, d in zip(indices, draws[taken], strict=True)))
                f.write("\n")


_PLAIN = (bool, int, float, str, type(None), np.generic)


class CallbackStates:
    """What training changes in the user's callbacks, so a resume sets it back: their plain attributes that differ
    from right after on_train_begin, and their lists of arrays; not those the constructor names (the config's)."""

    def __init__(self, callbacks: list):
        self.callbacks = callbacks
        self.baseline: list[dict] = []

    def started(self, saved: list | None, arrays: dict) -> None:
        """Called after on_train_begin: the baseline, then a resumed run's saved state over it."""
        self.baseline = [_plain(c) for c in self.callbacks]
        for i, callback in enumerate(self.callbacks):
            for name, value in (saved[i] if saved and i < len(saved) else {}).items():
                setattr(callback, name, value)
            for name in {key.split(".")[1] for key in arrays if key.startswith(f"{i}.")}:
                count = sum(key.startswith(f"{i}.{name}.") for key in arrays)
                setattr(callback, name, [arrays[f"{i}.{name}.{j}"] for j in range(count)])

    def changed(self) -> tuple[list[dict], dict]:
        """(for state.json: each callback's changed plain values, for the checkpoint's arrays file)."""
        plain = [{name: value for name, value in _plain(c).items() if base.get(name, _MISSING) != value}
                 for c, base in zip(self.callbacks, self.baseline, strict=True)]
        arrays = {f"{i}.{name}.{j}": np.asarray(a) for i, c in enumerate(self.callbacks)
                  for name, value in _state(c).items() if _array_list(value) for j, a in enumerate(value)}
        return plain, arrays


_MISSING = object()


def _state(callback) -> dict:
    """The callback's attributes but those its constructor names."""
    given = inspect.signature(type(callback).__init__).parameters
    return {name: value for name, value in vars(callback).items() if name not in given}


def _plain(callback) -> dict:
    return {name: value.item() if isinstance(value, np.generic) else value
            for name, value in _state(callback).items() if isinstance(value, _PLAIN)}


def _array_list(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(a, np.ndarray) for a in value)
