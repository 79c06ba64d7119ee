"""The trainer's own Keras callbacks: the progress bar and checkpoints inside an epoch.
`trainer.callbacks` adds any others (EarlyStopping, TensorBoard, ...) by `_target_`."""

from __future__ import annotations

import sys
from pathlib import Path

import keras
from tqdm import tqdm

from app import checkpoint


class Progress(keras.callbacks.Callback):
    """A bar an epoch with the running loss, accuracy and images/s."""

    def __init__(self, epochs: int, steps: int):
        super().__init__()
        self.epochs, self.steps = epochs, steps
        self.bar = None

    def on_epoch_begin(self, epoch, logs=None):
        self.bar = tqdm(total=self.steps, desc=f"epoch {epoch + 1}/{self.epochs}", unit="step", file=sys.stderr,
                        mininterval=0.5, dynamic_ncols=True)

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

    def __init__(self, run_dir: Path, every: int, state: dict):
        super().__init__()
        self.run_dir, self.every, self.state = run_dir, every, state

    def on_train_batch_end(self, batch, logs=None):
        step = self.state["steps_before_epoch"] + batch + 1
        if step % self.every == 0:
            best = self.state["best"]
            checkpoint.save(self.model, self.run_dir, step,
                            {"epoch_complete": False, "step": step, "batch_in_epoch": batch + 1},
                            protect=best and best[1])
