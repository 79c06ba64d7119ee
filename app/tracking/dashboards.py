"""Dashboards (conf/logger, any number): TensorBoard, scalars.csv, MLflow; a resume cuts what's past the checkpoint."""

from __future__ import annotations

import csv
import logging
from dataclasses import fields
from pathlib import Path

import keras
import numpy as np

from app import sheets
from app.capacity.memory import PeakMemory
from app.config import closed_target
from app.data.sources import label_sets
from app.io import open_own, write_picture
from app.runs.checkpoint import RunState
from app.runs.tables import rewrite_keeping_rows
from app.schema import LoggerConfig
from app.tracking import event_files
from app.tracking.mlflow_writer import flattened

log = logging.getLogger("app.train")
EVENTS = "tensorboard"
SCALARS = "scalars.csv"


class Writer:
    """logger=none, writing nothing; every writer's calls, in run order; built from the run dir and its logger node."""

    def __init__(self, run_dir: Path | None = None, node=None):
        pass

    def begin(self, config: dict, *, trial: str, step: int) -> None:
        """As a run starts or resumes at `step`: HParams and tags for a new run (a resumed one's events hold them)."""
        if step == 0:
            self.hparams(flattened(config), trial=trial)
            if config.get("tags"):
                self.tags(list(config["tags"]))

    def scalars(self, split: str, values: dict, step: int) -> None:
        pass

    def images(self, tag: str, batch: np.ndarray, step: int) -> None:
        pass

    def hparams(self, values: dict, trial: str) -> None:
        pass

    def tags(self, tags: list[str]) -> None:
        pass

    def checkpointed(self, step: int) -> None:
        """Called just before the checkpoint of `step` is saved: what was written up to it is final."""

    def finish_and_upload(self, status: str) -> None:
        """The run's end (completed, failed, interrupted): files closed; a remote run (MLflow) uploaded and ended."""


class Writers(Writer):
    """Several loggers at once (logger=[tensorboard,mlflow]): each call to each, in order."""

    def __init__(self, chosen: list):
        self.chosen = chosen

    def begin(self, config: dict, *, trial: str, step: int) -> None:
        for out in self.chosen:
            out.begin(config, trial=trial, step=step)

    def scalars(self, split: str, values: dict, step: int) -> None:
        for out in self.chosen:
            out.scalars(split, values, step)

    def images(self, tag: str, batch: np.ndarray, step: int) -> None:
        for out in self.chosen:
            out.images(tag, batch, step)

    def checkpointed(self, step: int) -> None:
        for out in self.chosen:
            out.checkpointed(step)

    def finish_and_upload(self, status: str) -> None:
        for out in self.chosen:
            out.finish_and_upload(status)


class TensorBoardWriter(Writer):
    """logger=tensorboard: event files as Keras's TensorBoard callback lays them out, without TensorFlow."""

    def __init__(self, run_dir: Path, node=None):
        self.root = Path(run_dir) / EVENTS
        self.files = {split: event_files.EventFile(self.root / split) for split in ("train", "validation")}

    def scalars(self, split: str, values: dict, step: int) -> None:
        if not values:  # as tf.summary wrote: no event without a value (an epoch without validation)
            return
        self.files[split].write_summary(event_files.scalars(values), step)
        self.files[split].flush()

    def images(self, tag: str, batch: np.ndarray, step: int) -> None:
        self.files["train"].write_summary(event_files.images(tag, batch), step)
        self.files["train"].flush()

    def hparams(self, values: dict, trial: str) -> None:
        top = event_files.EventFile(self.root)
        try:
            top.write_summary(event_files.hparams(values, trial), 0)
        finally:
            top.close()

    def tags(self, tags: list[str]) -> None:
        """The run's tags as a text summary (TensorBoard's Text tab); HParams has them as `tags` too."""
        self.files["train"].write_summary(event_files.text("tags", ", ".join(tags)), 0)
        self.files["train"].flush()

    def finish_and_upload(self, status: str) -> None:
        for file in self.files.values():
            file.close()


class CsvWriter(Writer):
    """logger=csv: scalars.csv, a row a value (split, tag, step, value)."""

    def __init__(self, run_dir: Path, node=None):
        self.path = Path(run_dir) / SCALARS

    def scalars(self, split: str, values: dict, step: int) -> None:
        new = not self.path.exists()
        with open_own(self.path, "a", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            if new:
                out.writerow(["split", "tag", "step", "value"])
            out.writerows([split, tag, step, value] for tag, value in values.items())


def writer(target: str | None, run_dir: Path, node=None) -> Writer:
    """The writer a logger's `_target_` names (`node`: its config); for None, one that writes nothing."""
    return Writer() if target is None else closed_target("logger", target)(run_dir, node)


def writers(logger: LoggerConfig, run_dir: Path) -> Writer:
    """The writers of each logger chosen (`logger=[tensorboard,mlflow]`), as one."""
    nodes = [getattr(logger, f.name) for f in fields(logger)]
    chosen = [writer(node._target_, run_dir, node) for node in nodes if node is not None]
    return Writers(chosen) if len(chosen) > 1 else (chosen or [Writer()])[0]


class Dashboard(keras.callbacks.Callback):
    """Keras callback: step/ and epoch/ scalars (validation apart) to `out` by global step; `completed` at the end."""

    def __init__(self, out: Writer, state: RunState, memory: PeakMemory, telemetry):
        """`telemetry`: the loader's snapshot of a window (Loader.telemetry), read at each logging step."""
        super().__init__()
        self.out, self.state, self.memory, self.telemetry = out, state, memory, telemetry

    def on_train_batch_end(self, batch, logs=None):
        if not logs:  # between reads: nothing was read off the device
            return
        values = {f"step/{name}": value for name, value in logs.items()}
        values["step/learning_rate"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        values["step/peak_memory_mb"] = self.memory.peak / 2**20
        values["step/peak_trainer_mb"] = self.memory.peak_root / 2**20
        values["step/peak_workers_mb"] = self.memory.peak_children / 2**20
        values.update({f"step/{name}": v for name, v in self.telemetry("live").items() if v is not None})
        self.out.scalars("train", values, self.state.steps_before_epoch + batch + 1)

    def on_epoch_end(self, epoch, logs=None):
        step = self.state.steps_before_epoch + self.state.figures.steps
        logs = logs or {}
        self.out.scalars("train", {f"epoch/{k}": v for k, v in logs.items() if not k.startswith("val_")}, step)
        self.out.scalars("validation", {f"epoch/{k[4:]}": v for k, v in logs.items() if k.startswith("val_")}, step)

    def on_train_end(self, logs=None):
        self.out.finish_and_upload("completed")


def write_first_batch(out: Writer, run_dir: Path, batch: tuple, class_names: list[str]) -> None:
    """The first training batch as the model gets it (augmented, uint8): to `out`, and as augmented.png with classes."""
    images, labels = batch[0], batch[1]
    seen = sheets.rgb_view(images)  # several bands or 16 bits: three of them, stretched
    out.images("augmented", seen, 0)
    masks = np.ndim(labels) == 3  # a mask an image (data.task=segmentation): laid over it
    sheet = (sheets.masked_grid(seen, labels, class_names) if masks else
             sheets.grid(seen, [label_sets.text(y, class_names) for y in labels]))
    write_picture(Path(run_dir) / "augmented.png", sheet.save)


def rewrite_without_events_after(run_dir: Path, step: int) -> None:
    """Cuts the dashboards back to `step`: event files and scalars.csv rewritten atomically without anything later."""
    rewrite_keeping_rows(Path(run_dir) / SCALARS, lambda row: int(row["step"]) <= step, "step")
    root = Path(run_dir) / EVENTS
    files = sorted(root.rglob("*tfevents*")) if root.is_dir() else []
    for path in files:
        event_files.rewrite_keeping_events(path, lambda event: event.step <= step)
    if files:
        log.info("dashboards: events after step %d removed from %d event files", step, len(files))
