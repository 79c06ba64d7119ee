"""The contract every task keeps (`Task`), and what `evaluate` hands a task to score (`Evaluation`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from app.errors import DataError
from app.schema import Config, TrainerConfig
from app.targets import Targets

log = logging.getLogger("app.evaluate")


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """One `evaluate`: the run, its source, the split scored, the checkpoint's model and where its files go."""

    config: Config
    source: Any  # app/data/source.py's Source
    split_name: str  # val or test
    net: Any  # the checkpoint's Keras model
    checkpoint: Path
    run_dir: Path
    out: Path
    slides: Any = None  # the predict group (SlidePredictConfig): how a segmentation run's slides are tiled

    @property
    def split(self):
        return self.source.val if self.split_name == "val" else self.source.test


class Task(Protocol):
    """What differs by `data.task` on the model's side; the data's side is its `targets`."""

    targets: ClassVar[Targets]
    activation: ClassVar[str]  # the head's: softmax, sigmoid
    output: ClassVar[str]  # what the model predicts: "image" (one a sample) or "pixels" (one a pixel, a mask)
    monitor: ClassVar[str]  # trainer.monitor=auto's
    prediction_column: ClassVar[str]  # predictions.csv's column of what an image shows
    parity_key: ClassVar[str]  # export.json's figure of agreement
    parity_words: ClassVar[str]  # what export says it is

    def metric_names(self, trainer: TrainerConfig, class_names: list[str]) -> list[str]: ...
    def objectives(self, trainer: TrainerConfig, class_names: list[str], weights, ignore_index=None) -> tuple: ...
    def weighed(self, weights: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray | None]: ...
    def evaluate(self, job: Evaluation) -> float: ...
    def cut(self, given: str | None, run_dir: Path, names: list[str], trainer: TrainerConfig) -> np.ndarray | None: ...
    def shown(self, probabilities: np.ndarray, cut: np.ndarray | None) -> np.ndarray: ...
    def export_output(self, run_dir: Path, names: list[str], trainer: TrainerConfig) -> dict: ...
    def agreeing(self, theirs: np.ndarray, ours: np.ndarray, output: dict) -> float: ...


def unreadable(split, failed: dict[int, str], split_name: str) -> list[dict]:
    """The files left out, each with its error; none readable at all is an error."""
    left_out = [{"path": split.describe(i), "error": failed[i]} for i in sorted(failed)]
    for row in left_out:
        log.warning("left out of the %s split: %s (%s)", split_name, row["path"], row["error"])
    if left_out and len(left_out) == len(split):
        first = left_out[0]
        raise DataError(f"none of the {len(split)} files of the {split_name} split could be read (the first, "
                        f"{first['path']}: {first['error']}): fix or replace them, then run evaluate again.")
    return left_out
