"""A table's rows read and checked one by one (data=table): the path (data.root, data.path_format, listed once), the
label or (data.task=multilabel) labels, the split, group and weight; each fault a RowFault naming its column."""

from __future__ import annotations

import math
import os
import stat
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from app.data.sources import label_sets
from app.data.sources.table_files import Row
from app.errors import DataError

SPLITS = {"train": "train", "val": "val", "validation": "val", "test": "test"}


@dataclass(frozen=True, kw_only=True)
class Sample:
    at: str  # where its row is: "line 7", "row 7"
    rel: str  # the path as the table gives it, after data.path_format
    label: str | tuple[str, ...]  # data.task=multilabel: the classes it shows, sorted, maybe none
    split: str | None
    group: str | None
    size: int
    weight: float = 1.0  # data.columns.weight's, for data.sampling=weights
    stratum: str = ""  # what a drawn split balances: its label, or (multilabel) its rarest class
    corner: tuple[int, int] | None = None  # data.columns.x and y: a patch's (top, left) at level 0
    real: str = ""  # its file's real path
    file: tuple[int, int] = (0, 0)  # its file's (st_dev, st_ino): what tells one file listed twice, links too
    mask: tuple[str, int] | None = None  # data.task=segmentation: its mask's path (under data.root) and size


class RowFault(Exception):
    """A row the table check refuses: the column it is in, and why."""

    def __init__(self, column: str | None, why: str):
        super().__init__(why)
        self.column, self.why = column, why


@dataclass(frozen=True, kw_only=True)
class RowReader:
    table: Path
    root: Path
    columns: dict
    path_format: str | None
    classes: list[str] | None
    multilabel: dict | None = None  # data.task=multilabel: how its labels are read (_multilabel)
    edge: Callable | None = None  # a row a patch: (path, corner) → (axis, why) where it passes its image's edge
    masks: bool = False  # data.task=segmentation: a row's mask (data.columns.mask) is its target, not a label

    def checked(self, rows: list[Row], *, skip: bool) -> tuple[list[Sample], list[tuple[int, str, str]]]:
        """The rows that pass every check, and (line, where, why) of those left out (with `skip`; else an error)."""
        samples, left_out, seen, groups, names = [], [], {}, {}, {}
        for row in rows:
            try:
                sample = self.sample(row, seen, names)
                self.check_group(sample, groups)
            except RowFault as fault:
                where = f"{self.table}, {row.at}" + (f", column `{fault.column}`" if fault.column else "")
                if not skip:
                    raise DataError(f"{where}: {fault.why}. Fix the row or remove it; or set "
                                    "data.on_bad_sample=skip to leave such rows out (listed in bad_samples.txt) up "
                                    "to data.max_bad_fraction") from None
                left_out.append((row.number, where, fault.why))
                continue
            seen[(sample.file, sample.corner)] = (row.at, sample.rel)
            samples.append(sample)
        return samples, left_out

    def sample(self, row: Row, seen: dict, names: dict) -> Sample:
        # names: each file's (device, inode) → the real path it was first met by, its patches' group
        if row.fault:
            raise RowFault(None, row.fault)
        cols = self.columns
        given = _text(row.values.get(cols["path"]), cols["path"], form=None)  # a name is its bytes: NFC, NFD kept
        if not given:
            raise RowFault(cols["path"], "the path is empty")
        # "." and "//" dropped, ".." kept: after a linked folder it leads where the OS says, not where text does
        rel, size, real, file = self.file_of(PurePosixPath(self.path_format.replace("{}", given, 1)
                                                           if self.path_format else given).as_posix())
        corner = self.corner_of(row)
        if corner is not None and self.edge is not None and (past := self.edge(real, corner)) is not None:
            raise RowFault(cols[past[0]], past[1])
        if (file, corner) in seen:  # one file however spelt: ./a.jpg, /data/a.jpg, a link's folder, a hard link
            where = f"{rel} at x={corner[1]}, y={corner[0]}" if corner else rel
            at, first = seen[(file, corner)]
            raise RowFault(cols["path"], f"{where} is listed already, at {at}" + (f" (as {first})" if first != rel
                                                                                   else ""))
        label = "" if self.masks else self.label_of(row)
        split = self.split_of(row)
        group = _text(row.values.get(cols["group"]), cols["group"]) if cols["group"] else None
        group = group or (names.setdefault(file, real) if corner else None)  # an image's patches, links too: one split
        return Sample(at=row.at, rel=rel, label=label, split=split, group=group or None, size=size, real=real,
                      file=file, weight=self.weight_of(row), corner=corner, mask=self.mask_of(row))

    def file_of(self, rel: str) -> tuple[str, int, str, tuple[int, int]]:
        """(name on disk, size, real path, (device, inode)), else a RowFault; the name as given, else its other form."""
        # macOS stores NFD, people type NFC; two files whose names differ only so stay two
        candidates = dict.fromkeys([rel, *(unicodedata.normalize(form, rel) for form in ("NFC", "NFD"))])
        for form in candidates:
            try:
                found = (self.root / form).stat()
            except FileNotFoundError:
                continue
            except OSError as error:
                raise RowFault(self.columns["path"], f"{self.root / form} cannot be read ({error.strerror})") from None
            if not stat.S_ISREG(found.st_mode):
                what = "a folder" if stat.S_ISDIR(found.st_mode) else "not a regular file"
                raise RowFault(self.columns["path"], f"{self.root / form} is {what}, not an image file")
            return form, found.st_size, os.path.realpath(self.root / form), (found.st_dev, found.st_ino)
        raise RowFault(self.columns["path"], f"{self.root / rel} cannot be read (No such file or directory)")

    def mask_of(self, row: Row) -> tuple[str, int] | None:
        """data.columns.mask's file: (its path as given, its size); a RowFault where it is not there."""
        if not self.masks:
            return None
        column = self.columns["mask"]
        given = _text(row.values.get(column), column, form=None)
        if not given:
            raise RowFault(column, "the mask is empty")
        path = self.root / PurePosixPath(given).as_posix()
        try:
            found = path.stat()
        except OSError as error:
            raise RowFault(column, f"the image's mask {path} cannot be read ({error.strerror})") from None
        if not stat.S_ISREG(found.st_mode):
            raise RowFault(column, f"the image's mask {path} is not a regular file")
        return PurePosixPath(given).as_posix(), found.st_size

    def corner_of(self, row: Row) -> tuple[int, int] | None:
        """data.columns.y and x: a patch's corner, whole pixels at level 0, 0 or more."""
        if self.columns.get("x") is None:
            return None
        corner = []
        for key in ("y", "x"):
            column = self.columns[key]
            try:
                value = float(_text(row.values.get(column), column))
            except (TypeError, ValueError):
                raise RowFault(column, f"{row.values.get(column)!r} is not a pixel position") from None
            if value < 0 or value != int(value):
                raise RowFault(column, f"{value:g} is not a whole pixel position, 0 or more")
            corner.append(int(value))
        return corner[0], corner[1]

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

    def label_of(self, row: Row) -> str | tuple[str, ...]:
        """A row's class, or (multilabel) the classes it shows; a RowFault where it cannot be read or is unknown."""
        column, known = self.columns["label"], self.classes
        if self.multilabel is None:
            label = _text(row.values.get(column), column)
            if not label:
                raise RowFault(column, "the label is empty")
            _check_printable(label, column)
            if known and label not in known:
                raise RowFault(column, f"label {label!r} is none of data.classes ({', '.join(known)})")
            return label
        ml = self.multilabel
        try:
            names = label_sets.from_columns(row.values, ml["columns"], ml["uncertain"]) if ml["columns"] else \
                label_sets.from_cell(_text(row.values.get(column), column), separator=ml["separator"] or " ",
                                     none_label=ml["none_label"], column=column)
        except label_sets.LabelFault as fault:
            raise RowFault(fault.column, fault.why) from None
        for name in names:
            _check_printable(name, column)
        unknown = [name for name in names if known and name not in known]
        if unknown:
            raise RowFault(column, f"label(s) {', '.join(unknown)} are none of data.classes ({', '.join(known)})")
        return names

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
            what = f"group {sample.group!r} ({self.columns['group']})" if self.columns["group"] else \
                f"image {sample.group!r} (its patches)"
            raise RowFault(self.columns["split"], f"{what} is in the {first[0]} split at {first[1]}, and here in "
                                                  f"{sample.split}: a group's rows all go to one split")


def _check_printable(label: str, column: str) -> None:
    """No control or invisible character (NUL, a zero-width space), no space but U+0020: two classes print alike."""
    odd = next((c for c in label if unicodedata.category(c)[0] in "CZ" and c != " "), None)
    if odd is not None:
        raise RowFault(column, f"label {label!r} holds the character U+{ord(odd):04X} "
                               f"({unicodedata.name(odd, 'a control character')}), which prints as another or as "
                               "nothing: write the label with letters, digits, punctuation and plain spaces")


def _text(value, column: str, form: str | None = "NFC") -> str:
    """A cell as `form` text: a whole float as an int (JSON writers give 1 or 1.0); NaN is empty; a list refused."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (list, dict)):
        raise RowFault(column, f"{value!r} is not one value")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    return unicodedata.normalize(form, text) if form else text
