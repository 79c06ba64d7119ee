"""The rules of where labels come from and what they allow, beside app/rules.py's: data=table's keys, data.sampling=
weights's column, and data.task=multilabel's needs (a table or a copy of one; no balanced sampling, no top-k)."""

from __future__ import annotations

from typing import Any

from app.errors import config_error
from app.schema import DATA_TARGETS


def check_labels(cfg) -> None:
    """The label rules on `cfg` typed by its schemas. Raises ConfigError."""
    _check_table(cfg.data)
    _check_task(cfg)


def _check(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise config_error(key, value, allowed)


def _check_table(d) -> None:
    """data=table's keys, and data.sampling=weights's need of a table's weight column."""
    table = d._target_ == DATA_TARGETS["table"]
    _check(str(getattr(d.sampling, "value", d.sampling)) != "weights" or (table and bool(d.columns.weight)),
           "data.sampling", "weights", "uniform or balanced here: the weights are a table's column (data=table "
           "data.columns.weight=<name>)")
    if table:
        _check(bool(d.table and str(d.table).strip()), "data.table", d.table, "the table of images and labels, "
               "e.g. data.table=/data/train.csv (CSV, TSV, JSON Lines or Parquet)")
        _check(d.path is None, "data.path", d.path, "null with data=table: it reads data.table (and data.root, the "
               "folder its relative paths are under)")
        _check(d.path_format is None or d.path_format.count("{}") == 1, "data.path_format", d.path_format,
               'a pattern with one {} for the id, e.g. "{}.jpg" or "images/{}.tif"')
        _check(not d.classes or len(set(d.classes)) == len(d.classes), "data.classes", list(d.classes or []),
               "each class named once")
        _check(not (d.columns.split and d.test_fraction), "data.test_fraction", d.test_fraction,
               "0 with data.columns.split: the split column gives the test split (its `test` rows)")
        _check(bool(d.columns.label or d.columns.labels), "data.columns.label", d.columns.label,
               "the column of each row's label, e.g. data.columns.label=diagnosis (null only beside "
               "data.columns.labels, data.task=multilabel's 0/1 column a class)")
        _check(not d.columns.labels or str(getattr(d.task, "value", d.task)) == "multilabel", "data.columns.labels",
               list(d.columns.labels or []), "null with data.task=multiclass: one 0/1 column a class is several "
               "labels an image (data.task=multilabel)")
    several = str(getattr(d.task, "value", d.task)) == "multilabel"
    prepared = d._target_ == DATA_TARGETS["prepared"]
    _check(not several or prepared or (table and bool(d.label_separator or d.columns.labels)), "data.task",
           "multilabel", 'multiclass here: several labels an image come from a table, data=table with '
           'data.label_separator (" ", "|") or data.columns.labels (one 0/1 column a class), or from a copy '
           'prepared from one (data=prepared)')
    _check(not several or str(getattr(d.sampling, "value", d.sampling)) != "balanced", "data.sampling", "balanced",
           "uniform or weights with several labels an image: a class's share has no one count to balance")
    _check(getattr(d, "uncertain", None) in (None, "zero", "one"), "data.uncertain", getattr(d, "uncertain", None),
           "null (an uncertain -1 refused), zero or one")


def _check_task(cfg) -> None:
    """What one class an image has and several do not: top-k accuracy."""
    if str(getattr(cfg.data.task, "value", cfg.data.task)) != "multilabel":
        return
    _check(cfg.trainer.top_k in (None, "auto"), "trainer.top_k", cfg.trainer.top_k,
           "auto or null with data.task=multilabel: top-k accuracy scores one class an image, and a multilabel "
           "image has any number (each class's F1, AUC and average precision score it instead)")
