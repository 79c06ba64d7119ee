"""Where a run is: the running epoch's sums (EpochFigures) and what a checkpoint stores and a
resume restores (RunState). Plain data, no TensorFlow: the trainer reads it when interrupted."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class EpochFigures:
    steps: int = 0
    images: int = 0
    loss_sum: float = 0.0
    correct: float = 0.0
    waited_s: float = 0.0  # between the end of one step and the start of the next
    seconds: float = 0.0  # from the epoch's start to the end of its last step

    def add(self, logs: dict, n: int) -> None:
        self.steps += 1
        self.images += n
        self.loss_sum += float(logs["loss"]) * n
        self.correct += float(logs["accuracy"]) * n

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.images, 1)

    @property
    def accuracy(self) -> float:
        return self.correct / max(self.images, 1)

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds if self.seconds else 0.0

    @property
    def data_wait_fraction(self) -> float:
        return self.waited_s / self.seconds if self.seconds else 0.0

    def logs(self) -> dict:
        return {"loss": self.loss, "accuracy": self.accuracy, "images_per_s": self.images_per_s}

    def state(self) -> dict:
        """The running sums, for a checkpoint inside the epoch."""
        return asdict(self)


@dataclass
class RunState:
    """Where training is: what a checkpoint stores and what a resume restores."""

    config: dict
    epoch: int = 0  # 0-based, the epoch under way
    steps_before_epoch: int = 0
    order: np.ndarray | None = None  # this epoch's sample indices
    figures: EpochFigures | None = None  # this epoch's running sums
    best: list | None = None  # [val_accuracy, checkpoint name]

    @property
    def steps_done(self) -> int:
        """Training steps taken in this run so far, the running epoch's included."""
        return self.steps_before_epoch + (self.figures.steps if self.figures else 0)

    def checkpoint(self, batches_done: int, *, complete: bool, metrics: dict | None = None) -> dict:
        return {"epoch": self.epoch, "batch_in_epoch": batches_done, "epoch_complete": complete,
                "step": self.steps_before_epoch + batches_done, "figures": self.figures.state(),
                "best": self.best, "metrics": metrics, "config": self.config}
