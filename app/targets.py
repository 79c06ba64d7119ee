"""What a sample's target is, for each `data.task`: a task's data side, without a framework (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from app.errors import DataError, config_error
from app.schema import DATA_TARGETS
from app.schema.data import Sampling, Task


class Targets(Protocol):
    """The contract of a task's targets: every module below app/tasks/ asks these, never `data.task` itself."""

    task: ClassVar[Task]
    kind: ClassVar[str]  # the words a message uses: "one label an image"
    label_vectors: ClassVar[bool]  # a 0/1 row a sample, kept in a copy's labels-<split>.npy beside its index
    masks: ClassVar[bool]  # a mask a sample, read with its image (its split's mask_dtype) and carried beside it

    def target_bytes(self, classes: int) -> int: ...
    def untrained(self, labels: np.ndarray, class_names: list[str]) -> list[str]: ...
    def stratum(self, labels: np.ndarray) -> np.ndarray: ...  # the class a sample is drawn by, keeping shares
    def balanced_weights(self, labels: np.ndarray, classes: int) -> np.ndarray: ...
    def table_reading(self, data_cfg, header: list[str], table: Path) -> dict | None: ...
    def check(self, data, trainer) -> None: ...
    def check_patches(self) -> None: ...


def mask_dtype(classes: int, ignore_index: int | None) -> str:
    """A mask's integers: uint8, or uint16 where a class index or the ignore index passes 255."""
    return "uint8" if max(classes - 1, ignore_index or 0) <= 255 else "uint16"


def _check(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise config_error(key, value, allowed)


def _check_labels_only(data, trainer) -> None:
    """What only a class a pixel takes: masks, an ignore index, a Dice loss."""
    _check(data.ignore_index is None, "data.ignore_index", data.ignore_index, "null: an ignore index is a mask "
           "value (data.task=segmentation)")
    _check(data.masks_background is None, "data.masks_background", data.masks_background, "null: it names the "
           "class of pixels no polygon annotates (data.task=segmentation)")
    if data._target_ == DATA_TARGETS["folder"]:
        _check(data.masks is None, "data.masks", data.masks, "null: masks are data.task=segmentation's")
    if data._target_ == DATA_TARGETS["table"]:
        _check(data.columns.mask is None, "data.columns.mask", data.columns.mask, "null: masks are "
               "data.task=segmentation's")
    _check(trainer.loss == "crossentropy", "trainer.loss", trainer.loss, "crossentropy: dice scores masks "
           "(data.task=segmentation)")
    _check(data._target_ == DATA_TARGETS["table"] or not data.classes, "data.classes", list(data.classes or []),
           "null: this source names its classes (a table's, or data.task=segmentation's, name them by data.classes)")


class ClassIndex:
    """data.task=multiclass: one class an image, an int64 index."""

    task, kind, label_vectors, masks = Task.multiclass, "one label an image", False, False

    def target_bytes(self, classes: int) -> int:
        return np.dtype(np.int64).itemsize

    def untrained(self, labels: np.ndarray, class_names: list[str]) -> list[str]:
        shown = np.bincount(labels, minlength=len(class_names)) > 0
        return [name for name, seen in zip(class_names, shown, strict=False) if not seen]

    def stratum(self, labels: np.ndarray) -> np.ndarray:
        return labels

    def balanced_weights(self, labels: np.ndarray, classes: int) -> np.ndarray:
        """n / (classes × count) in train: each class weighs as much in all."""
        return len(labels) / (classes * np.maximum(np.bincount(labels, minlength=classes), 1).astype(np.float64))

    def table_reading(self, data_cfg, header: list[str], table: Path) -> None:
        return None

    def check_patches(self) -> None:
        return None

    def check(self, data, trainer) -> None:
        _check_labels_only(data, trainer)
        if data._target_ == DATA_TARGETS["table"]:
            _check(not data.columns.labels, "data.columns.labels", list(data.columns.labels or []), "null with "
                   "data.task=multiclass: one 0/1 column a class is several labels an image (data.task=multilabel)")


class ClassSet:
    """data.task=multilabel: any number of classes an image, none too; a 0/1 uint8 row of them."""

    task, kind, label_vectors, masks = Task.multilabel, "several labels an image", True, False

    def target_bytes(self, classes: int) -> int:
        return classes

    def untrained(self, labels: np.ndarray, class_names: list[str]) -> list[str]:
        return [name for name, seen in zip(class_names, labels.any(axis=0), strict=False) if not seen]

    def stratum(self, labels: np.ndarray) -> np.ndarray:
        return labels.argmax(axis=1)  # the first class it shows (none: the first class)

    def balanced_weights(self, labels: np.ndarray, classes: int) -> np.ndarray:
        """A class's negatives over its positives: the weight of its positives in the loss."""
        positives = labels.sum(axis=0).astype(np.float64)
        return (len(labels) - positives) / np.maximum(positives, 1)

    def table_reading(self, data_cfg, header: list[str], table: Path) -> dict:
        """How a table's cells hold the classes (app/data/sources/label_sets.py's keywords and the 0/1 columns)."""
        given = list(data_cfg.columns.labels or [])
        missing = [name for name in given if name not in header]
        if missing:
            raise DataError(f"data.table {table} has no column(s) {', '.join(missing)} (data.columns.labels): its "
                            f"columns are {', '.join(header)}")
        return {"separator": data_cfg.label_separator, "none_label": data_cfg.none_label, "columns": given,
                "uncertain": data_cfg.uncertain}

    def check(self, data, trainer) -> None:
        """Several labels come from a table (or its copy); no balanced draw, no top-k."""
        d = data
        _check_labels_only(d, trainer)
        table, prepared = d._target_ == DATA_TARGETS["table"], d._target_ == DATA_TARGETS["prepared"]
        _check(prepared or (table and bool(d.label_separator or d.columns.labels)), "data.task", self.task.value,
               'multiclass here: several labels an image come from a table, data=table with data.label_separator '
               '(" ", "|") or data.columns.labels (one 0/1 column a class), or from a copy prepared from one '
               '(data=prepared)')
        _check(Sampling(d.sampling) is not Sampling.balanced, "data.sampling", "balanced",
               "uniform or weights with several labels an image: a class's share has no one count to balance")
        _check(trainer.top_k in (None, "auto"), "trainer.top_k", trainer.top_k,
               "auto or null with data.task=multilabel: top-k accuracy scores one class an image, and a multilabel "
               "image has any number (each class's F1, AUC and average precision score it instead)")

    def check_patches(self) -> None:
        """With data.patches on: an image's result from its patches' is one class's for now."""
        raise config_error("data.task", self.task.value, "multiclass with data.patches: an image's result from its "
                           "patches' is one class's for now")


class PixelMasks:
    """data.task=segmentation: a class a pixel, a mask of class indices beside each image (uint8; uint16 past 255)."""

    task, kind, label_vectors, masks = Task.segmentation, "a class a pixel", False, True

    def target_bytes(self, classes: int) -> int:
        return 0  # a mask's bytes are the ring's (its split's mask_dtype), counted with its image

    def untrained(self, labels: np.ndarray, class_names: list[str]) -> list[str]:
        return []  # which classes the masks show is known only once every mask is read

    def stratum(self, labels: np.ndarray) -> np.ndarray:
        return labels

    def balanced_weights(self, labels: np.ndarray, classes: int) -> np.ndarray:
        raise ValueError("balanced weights count pixels: refused by `check`")

    def table_reading(self, data_cfg, header: list[str], table: Path) -> None:
        return None  # a row's mask is read from data.columns.mask, a file under data.root

    def check(self, data, trainer) -> None:
        """Masks from a folder, a table or a copy; named classes; the draws and figures that count pixels."""
        kind = {DATA_TARGETS["folder"]: "folder", DATA_TARGETS["table"]: "table"}.get(data._target_)
        _check(kind is not None or data._target_ == DATA_TARGETS["prepared"], "data.task", self.task.value,
               "multiclass here: masks come from data=folder (data.masks), data=table (data.columns.mask) or a "
               "copy prepared from one (data=prepared)")
        if kind == "folder":
            _check(bool(data.masks), "data.masks", data.masks, "the folder of the masks (data.task=segmentation)")
        if kind == "table":
            _check(bool(data.columns.mask), "data.columns.mask", data.columns.mask, "the column of each image's "
                   "mask (data.task=segmentation)")
            _check(not data.columns.labels and not data.label_separator, "data.columns.labels",
                   list(data.columns.labels or []), "null: a mask names a pixel's class")
        names = list(data.classes or [])
        _check(len(names) >= 2 and len(set(names)) == len(names), "data.classes", names, "the class names in the "
               "masks' index order, two or more, each once: a mask's values do not name themselves")
        ignore = data.ignore_index
        _check(ignore is None or len(names) <= ignore <= 65535, "data.ignore_index", ignore,
               f"null, or a mask value from {len(names)} (past the classes) to 65535, e.g. 255")
        _check(data.masks_background is None or data.masks_background in names, "data.masks_background",
               data.masks_background, f"null, or one of data.classes {names}: the class of pixels no polygon covers")
        _check(Sampling(data.sampling) is Sampling.uniform, "data.sampling", data.sampling.value,
               "uniform with data.task=segmentation: a class's share is one of pixels, not of images")
        _check(trainer.loss in ("crossentropy", "dice", "crossentropy+dice"), "trainer.loss", trainer.loss,
               "crossentropy, dice or crossentropy+dice")
        _check(trainer.class_weight != "balanced", "trainer.class_weight", "balanced",
               "null or {class name: weight} with data.task=segmentation (balanced counts images' labels)")
        _check(trainer.top_k in (None, "auto"), "trainer.top_k", trainer.top_k, "auto or null with "
               "data.task=segmentation: top-k scores one class an image")
        _check(not trainer.label_smoothing, "trainer.label_smoothing", trainer.label_smoothing,
               "0 with data.task=segmentation")

    def check_patches(self) -> None:
        return None  # a patch's mask is read where it lies (app/data/slides/region_masks.py)


TARGETS: dict[Task, Targets] = {Task.multiclass: ClassIndex(), Task.multilabel: ClassSet(),
                                Task.segmentation: PixelMasks()}


def targets_of(task: Task | str) -> Targets:
    """The targets of `data.task` (or a copy's manifest's task): the one place a task's name is read."""
    return TARGETS[Task(task)]
