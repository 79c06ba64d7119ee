"""data=table: a source read from a table of samples (app/data/table_files.py reads the file), a row an image and
its label, its split given by a column or drawn as a folder's is (by class, and by group where a group column is
given, so a patient's or a scene's rows never straddle two splits). Every row is checked before any worker starts,
each fault named by its line; `data.on_bad_sample=skip` leaves such rows out, listed, up to data.max_bad_fraction."""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.data.folder import split_flat
from app.data.source import FileSplit, Source
from app.data.table_files import Row, read_rows
from app.errors import DataError

log = logging.getLogger(__name__)
SPLITS = {"train": "train", "val": "val", "validation": "val", "test": "test"}
HF_PATH = "file_name"  # Hugging Face ImageFolder's metadata column


@dataclass(frozen=True, kw_only=True)
class Sample:
    at: str  # where its row is: "line 7", "row 7"
    rel: str  # the path as the table gives it, after data.path_format
    label: str
    split: str | None
    group: str | None
    size: int
    weight: float = 1.0  # data.columns.weight's, for data.sampling=weights


class RowFault(Exception):
    """A row the table check refuses: the column it is in, and why."""

    def __init__(self, column: str | None, why: str):
        super().__init__(why)
        self.column, self.why = column, why


def table_source(data_cfg) -> Source:
    """data=table: the source of a config's data node."""
    table = Path(str(data_cfg.table)).expanduser().absolute()
    if not table.is_file():
        raise DataError(f"data.table {table} does not exist or is not a file: give a CSV, TSV, JSON Lines or "
                        "Parquet table of the images and their labels")
    header, rows = read_rows(table)
    if not rows:
        raise DataError(f"data.table {table} holds no rows: a row an image, with its path and label")
    columns = _columns(data_cfg.columns, header, table)
    root = Path(data_cfg.root).expanduser().absolute() if data_cfg.root else table.parent
    reader = _RowReader(table=table, root=root, columns=columns, path_format=data_cfg.path_format,
                        classes=data_cfg.classes)
    samples, left_out = reader.checked(rows, skip=str(data_cfg.on_bad_sample.value) == "skip")
    _check_left_out(left_out, len(rows), data_cfg.max_bad_fraction, table)
    class_names = list(data_cfg.classes) if data_cfg.classes else sorted({s.label for s in samples})
    if len(class_names) < 2:
        raise DataError(f"data.table {table} has one class ({', '.join(class_names) or 'none'}) in column "
                        f"`{columns['label']}`: a classifier needs at least 2")
    parts = _split(samples, columns, data_cfg)
    _check_every_class_trains(parts, class_names, table)
    return _source(table, root, class_names, parts=parts, left_out=left_out)


def _columns(given, header: list[str], table: Path) -> dict[str, str | None]:
    """The columns the config names, checked to be in the table (Hugging Face's `file_name` for the path's)."""
    columns = {"path": given.path, "label": given.label, "split": given.split, "group": given.group,
               "weight": given.weight}
    if not header:
        raise DataError(f"data.table {table} holds no rows: a row an image, with its path and label")
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise DataError(f"data.table {table} names column(s) {', '.join(f'`{n}`' for n in twice)} more than once: "
                        "give each column a name of its own")
    if columns["path"] == "path" and "path" not in header and HF_PATH in header:
        columns["path"] = HF_PATH
    for key, name in columns.items():
        if name is not None and name not in header:
            raise DataError(f"data.table {table} has no column `{name}` (data.columns.{key}): its columns are "
                            f"{', '.join(header)}. Name the right one, e.g. data.columns.{key}={header[0]}")
    return columns


@dataclass(frozen=True, kw_only=True)
class _RowReader:
    table: Path
    root: Path
    columns: dict
    path_format: str | None
    classes: list[str] | None

    def checked(self, rows: list[Row], *, skip: bool) -> tuple[list[Sample], list[tuple[int, str, str]]]:
        """The rows that pass every check, and (line, where, why) of those left out (with `skip`; else an error)."""
        samples, left_out, seen, groups = [], [], {}, {}
        for row in rows:
            try:
                sample = self.sample(row, seen)
                self.check_group(sample, groups)
            except RowFault as fault:
                where = f"{self.table}, {row.at}" + (f", column `{fault.column}`" if fault.column else "")
                if not skip:
                    raise DataError(f"{where}: {fault.why}. Fix the row or remove it; or set "
                                    "data.on_bad_sample=skip to leave such rows out (listed in bad_samples.txt) up "
                                    "to data.max_bad_fraction") from None
                left_out.append((row.number, where, fault.why))
                continue
            seen[sample.rel] = row.at
            samples.append(sample)
        return samples, left_out

    def sample(self, row: Row, seen: dict) -> Sample:
        if row.fault:
            raise RowFault(None, row.fault)
        cols = self.columns
        given = _text(row.values.get(cols["path"]), cols["path"])
        if not given:
            raise RowFault(cols["path"], "the path is empty")
        rel = posixpath.normpath(self.path_format.replace("{}", given, 1) if self.path_format else given)
        if rel in seen:  # normalised: ./a.jpg and a.jpg are one file
            raise RowFault(cols["path"], f"{rel} is listed already, at {seen[rel]}")
        label = _text(row.values.get(cols["label"]), cols["label"])
        if not label:
            raise RowFault(cols["label"], "the label is empty")
        if self.classes and label not in self.classes:
            raise RowFault(cols["label"], f"label {label!r} is none of data.classes ({', '.join(self.classes)})")
        split = self.split_of(row)
        group = _text(row.values.get(cols["group"]), cols["group"]) if cols["group"] else None
        try:
            size = (self.root / rel).stat().st_size
        except OSError as error:
            raise RowFault(cols["path"], f"{self.root / rel} cannot be read ({error.strerror})") from None
        return Sample(at=row.at, rel=rel, label=label, split=split, group=group or None, size=size,
                      weight=self.weight_of(row))

    def weight_of(self, row: Row) -> float:
        column = self.columns["weight"]
        if column is None:
            return 1.0
        text = _text(row.values.get(column), column)
        try:
            weight = float(text)
        except ValueError:
            weight = -1.0
        if not 0 <= weight < float("inf"):
            raise RowFault(column, f"weight {text!r} is not a number of 0 or more")
        return weight

    def split_of(self, row: Row) -> str | None:
        column = self.columns["split"]
        if column is None:
            return None
        value = _text(row.values.get(column), column).lower()
        if value not in SPLITS:
            raise RowFault(column, f"split {value!r} is none of train, val (or validation), test")
        return SPLITS[value]

    def check_group(self, sample: Sample, groups: dict) -> None:
        """A group met in one split before, and in another now: refused (a patient's scans in train and val)."""
        if sample.group is None or sample.split is None:
            return
        first = groups.setdefault(sample.group, (sample.split, sample.at))
        if first[0] != sample.split:
            raise RowFault(self.columns["split"], f"group {sample.group!r} ({self.columns['group']}) is in the "
                                                  f"{first[0]} split at {first[1]}, and here in {sample.split}: a "
                                                  "group's rows all go to one split")


def _text(value, column: str) -> str:
    """A cell as text: a number is its digits; a list or a mapping is no single value."""
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        raise RowFault(column, f"{value!r} is not one value")
    return str(value).strip()


def _check_left_out(left_out: list, total: int, max_fraction: float, table: Path) -> None:
    if not left_out:
        return
    log.warning("%d of the %d rows of %s left out (data.on_bad_sample=skip), listed in bad_samples.txt; the "
                "first: %s: %s", len(left_out), total, table, left_out[0][1], left_out[0][2])
    if len(left_out) > max_fraction * total:
        raise DataError(f"{len(left_out)} of the {total} rows of data.table {table} fail its checks, more than "
                        f"data.max_bad_fraction={max_fraction}; the first: {left_out[0][1]}: {left_out[0][2]}")


def _split(samples: list[Sample], columns: dict, data_cfg) -> dict[str, list[Sample]]:
    """train, val and test rows: as the split column gives them, else drawn by class (and group) as folders are."""
    if columns["split"] is not None:
        parts = {name: [s for s in samples if s.split == name] for name in ("train", "val", "test")}
    elif columns["group"] is not None:
        parts = _split_groups(samples, data_cfg.val_fraction, data_cfg.test_fraction)
    else:
        by_class: dict[str, list] = {}
        for s in samples:
            by_class.setdefault(s.label, []).append((s.rel, s.size, 0))
        train, val, test = split_flat(by_class, data_cfg.val_fraction, data_cfg.test_fraction)
        where = {rel: name for name, part in (("train", train), ("val", val), ("test", test or {}))
                 for files in part.values() for rel, _, _ in files}
        parts = {name: [s for s in samples if where[s.rel] == name] for name in ("train", "val", "test")}
    for name in ("train", "val"):
        if not parts[name]:
            raise DataError(f"data.table {data_cfg.table} leaves the {name} split empty: "
                            + ("give rows of it in the split column" if columns["split"] else
                               "more rows (or groups) are needed for data.val_fraction to hold some out"))
    return parts


def _check_every_class_trains(parts: dict, class_names: list[str], table) -> None:
    """A class no training row has: refused, as a folder's validation class missing from train/ is."""
    trained = {s.label for s in parts["train"]}
    missing = [name for name in class_names if name not in trained]
    if missing:
        raise DataError(f"data.table {table}: class(es) {', '.join(missing)} have no row in the training split, so "
                        "the model could never learn them: give them training rows (or leave them out of "
                        "data.classes)")


def _split_groups(samples: list[Sample], val_fraction: float, test_fraction: float) -> dict[str, list[Sample]]:
    """Whole groups to each split: groups stratified by their most common label, drawn by a hash of their name."""
    rows: dict[str, list[Sample]] = {}
    for s in samples:
        rows.setdefault(s.group or f"\0{s.rel}", []).append(s)  # a row without a group is a group of its own
    by_class: dict[str, list] = {}
    for group, members in rows.items():
        label = min(Counter(m.label for m in members).most_common(), key=lambda pair: (-pair[1], pair[0]))[0]
        by_class.setdefault(label, []).append((group, len(members), 0))
    train, val, test = split_flat(by_class, val_fraction, test_fraction)
    return {name: [s for entries in (part or {}).values() for group, _, _ in entries for s in rows[group]]
            for name, part in (("train", train), ("val", val), ("test", test))}


def _source(table: Path, root: Path, class_names: list[str], *, parts: dict, left_out: list) -> Source:
    index = {name: i for i, name in enumerate(class_names)}

    def file_split(samples: list[Sample]) -> FileSplit:
        return FileSplit([os.path.join(root, s.rel) for s in samples], [index[s.label] for s in samples])

    listed = sorted((s.rel, s.size) for part in parts.values() for s in part)
    h = hashlib.sha256(f"{table.stat().st_size}\0{_sha256(table)}\n".encode())
    for rel, size in listed:
        h.update(f"{rel}\0{size}\n".encode())
    fingerprint = h.hexdigest()
    split = {"source": "table", "fingerprint": fingerprint, "names_sizes_fingerprint": fingerprint,
             "fingerprint_covers": "the table's bytes, and each listed file's path and size",
             "class_names": class_names, "root": str(root), "table": str(table),
             **{name: [s.rel for s in parts[name]] for name in ("train", "val")},
             "test": [s.rel for s in parts["test"]] or None, "left_out": [line for line, _, _ in left_out]}
    return Source(name=f"table {table.name}", class_names=class_names, train=file_split(parts["train"]),
                  val=file_split(parts["val"]), fingerprint=fingerprint, split=split,
                  names_sizes_fingerprint=fingerprint, test=file_split(parts["test"]) if parts["test"] else None,
                  left_out=left_out, train_weights=np.array([s.weight for s in parts["train"]]))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
