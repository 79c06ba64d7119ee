"""The trainer's own Keras callbacks: the progress bar, checkpoints inside an epoch and
samples.csv. `trainer.callbacks` adds any others (EarlyStopping, TensorBoard, ...) by
`_target_`. Never imports the loader."""

from __future__ import annotations

import sys
from pathlib import Path

import keras
from tqdm import tqdm

from app.training import checkpoint
from app.training.steps import RunState


class Progress(keras.callbacks.Callback):
    """A bar an epoch with the running loss, accuracy and images/s."""

    def __init__(self, epochs: int, steps: int):
        super().__init__()
        self.epochs, self.steps = epochs, steps
        self.bar = None

    def on_epoch_begin(self, epoch, logs=None):
        self.bar = tqdm(total=self.steps, initial=int((logs or {}).get("first_batch", 0)), unit="step",
                        desc=f"epoch {epoch + 1}/{self.epochs}", file=sys.stderr, mininterval=0.5,
                        dynamic_ncols=True)

    def on_train_batch_end(self, batch, logs=None):
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{logs['loss']:.4f}", acc=f"{logs['accuracy']:.3f}",
                             img_s=f"{logs['images_per_s']:.0f}", refresh=False)
        if batch + 1 >= self.steps:  # closed before validation, so the epoch's log line follows it
            self.bar.close()

    def on_train_end(self, logs=None):
        if self.bar is not None:
            self.bar.close()


class StepCheckpoint(keras.callbacks.Callback):
    """`trainer.checkpoint_every_steps`: a checkpoint inside the epoch every N global steps."""

    def __init__(self, run_dir: Path, every: int, steps_per_epoch: int, state: RunState):
        super().__init__()
        self.run_dir, self.every, self.steps_per_epoch, self.state = run_dir, every, steps_per_epoch, state

    def on_train_batch_end(self, batch, logs=None):
        done = batch + 1
        if done == self.steps_per_epoch:
            return  # the epoch's end saves this step, with its validation
        if (self.state.steps_before_epoch + done) % self.every == 0:
            best = self.state.best
            checkpoint.save(self.model, self.run_dir, self.state.steps_before_epoch + done,
                            self.state.checkpoint(done, complete=False), protect=best and best[1])


class SampleRecorder(keras.callbacks.Callback):
    """`trainer.record_samples`: samples.csv, the sample indices each training step saw."""

    def __init__(self, path: Path, batch_size: int, state: RunState):
        super().__init__()
        self.path, self.batch_size, self.state = path, batch_size, state

    def on_train_batch_end(self, batch, logs=None):
        new = not self.path.exists()
        indices = self.state.order[batch * self.batch_size:(batch + 1) * self.batch_size]
        with open(self.path, "a", encoding="utf-8") as f:
            if new:
                f.write("step,epoch,batch,indices\n")
            f.write(f"{self.state.steps_before_epoch + batch + 1},{self.state.epoch + 1},{batch},"
                    f"{' '.join(map(str, indices))}\n")
