"""data=table: a row an image and its label, split by a column or as a folder is (by class, and by group: a patient's
rows in one split). Every row checked before any worker starts, faults named by line; on_bad_sample=skip lists them."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections import Counter
from pathlib import Path

import numpy as np

from app.data.masked import MaskedFileSplit, MaskRule
from app.data.slides.layouts import edge_check
from app.data.source import FileSplit, Source, check_every_class_trains
from app.data.sources import label_sets
from app.data.sources.folder import split_flat
from app.data.sources.table_files import read_rows
from app.data.sources.table_rows import RowReader, Sample
from app.errors import DataError
from app.io import is_url
from app.targets import targets_of

log = logging.getLogger(__name__)
HF_PATH = "file_name"  # Hugging Face ImageFolder's metadata column


def table_source(data_cfg) -> Source:
    for key, given in (("data.table", data_cfg.table), ("data.root", data_cfg.root)):
        if is_url(given):  # never a local path of a URL's text: "./s3:/bucket/t.csv does not exist"
            raise DataError(f"{key}={given} is a URL: a table and the images it lists are read from local files. "
                            f"Copy them to this machine and give the local path, or prepare a copy (python -m app "
                            "prepare data=table ... prepare.out=s3://...) and train on it with data=prepared")
    table = Path(str(data_cfg.table)).expanduser().absolute()
    if not table.is_file():
        raise DataError(f"data.table {table} does not exist or is not a file: give a CSV, TSV, JSON Lines or "
                        "Parquet table of the images and their labels")
    header, rows = read_rows(table)
    if not rows:
        raise DataError(f"data.table {table} holds no rows: a row an image, with its path and label")
    targets = targets_of(data_cfg.task)
    columns = _columns(data_cfg.columns, header, table, masks=targets.masks)
    root = Path(data_cfg.root).expanduser().absolute() if data_cfg.root else table.parent
    reader = RowReader(table=table, root=root, columns=columns, path_format=data_cfg.path_format,
                       classes=data_cfg.classes, multilabel=targets.table_reading(data_cfg, header, table),
                       edge=edge_check(data_cfg.patches) if columns["x"] and data_cfg.patches.size else None,
                       masks=targets.masks)
    samples, left_out = reader.checked(rows, skip=str(data_cfg.on_bad_sample.value) == "skip")
    _check_left_out(left_out, len(rows), data_cfg.max_bad_fraction, table)
    samples, class_names = (samples, list(data_cfg.classes)) if targets.masks else \
        _classes(samples, data_cfg, multilabel=reader.multilabel is not None)
    if len(class_names) < 2:
        where = f"column `{columns['label']}`" if columns["label"] else "data.columns.labels"
        raise DataError(f"data.table {table} has one class ({', '.join(class_names) or 'none'}) in {where}: a "
                        "classifier needs at least 2")
    rule = MaskRule.of(data_cfg) if targets.masks else None
    source = _source(table, (root, rule), class_names, parts=_split(samples, columns, data_cfg), left_out=left_out)
    check_every_class_trains(source, f"data.table {table}", targets=targets, unit="row",
                             fix="give them training rows (or leave them out of data.classes)")
    return source


def _columns(given, header: list[str], table: Path, *, masks: bool) -> dict[str, str | None]:
    """The columns the config names, checked to be in the table (Hugging Face's `file_name` for the path's)."""
    columns = {"path": given.path, "label": None if given.labels or masks else given.label,  # 0/1 columns, masks
               "split": given.split, "group": given.group, "weight": given.weight, "x": given.x, "y": given.y,
               "mask": given.mask}
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


def _classes(samples: list[Sample], data_cfg, *, multilabel: bool) -> tuple[list[Sample], list[str]]:
    """The samples with their strata, and the class names: data.classes, the 0/1 columns, or the labels sorted."""
    if not multilabel:
        names = list(data_cfg.classes) if data_cfg.classes else sorted({s.label for s in samples})
        return [dataclasses.replace(s, stratum=s.label) for s in samples], names
    names = list(data_cfg.classes or data_cfg.columns.labels or sorted({n for s in samples for n in s.label}))
    strata = label_sets.strata([s.label for s in samples])
    return [dataclasses.replace(s, stratum=stratum) for s, stratum in zip(samples, strata, strict=True)], names


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
    elif columns["group"] is not None or columns["x"] is not None:  # patches: by their image
        parts = _split_groups(samples, data_cfg.val_fraction, data_cfg.test_fraction)
    else:
        by_class: dict[str, list] = {}
        for s in samples:
            by_class.setdefault(s.stratum, []).append((s.rel, s.size, 0))
        train, val, test = split_flat(by_class, data_cfg.val_fraction, data_cfg.test_fraction)
        where = {rel: name for name, part in (("train", train), ("val", val), ("test", test or {}))
                 for files in part.values() for rel, _, _ in files}
        parts = {name: [s for s in samples if where[s.rel] == name] for name in ("train", "val", "test")}
    for name in ("train", "val"):
        if not parts[name]:
            raise DataError(f"data.table {data_cfg.table} leaves the {name} split empty: "
                            + ("give rows of it in the split column" if columns["split"] else
                               "more rows (or groups) are needed for data.val_fraction to hold some out"))
    if columns["split"] is None and (columns["group"] is not None or columns["x"] is not None):
        _warn_what_groups_allow(parts, data_cfg)
    return parts


def _classes_in(part: list[Sample]) -> set[str]:
    return {name for s in part for name in ((s.label,) if isinstance(s.label, str) else s.label)}


def _warn_what_groups_allow(parts: dict, data_cfg) -> None:
    """Warns where whole groups gave val (or test) under half or over twice its share, or none of a trained class."""
    rows = [s for part in parts.values() for s in part]
    sizes = Counter(s.group or s.rel for s in rows)
    (largest, most), trained = sizes.most_common(1)[0], _classes_in(parts["train"])
    for name, asked in (("val", data_cfg.val_fraction), ("test", data_cfg.test_fraction)):
        missing = sorted(trained - _classes_in(parts[name]))
        if not asked or (asked / 2 <= len(parts[name]) / len(rows) <= 2 * asked and not missing):
            continue
        log.warning("data.table %s: split by whole groups, the %s split holds %d of the %d rows (%d of the %d groups; "
                    "data.%s_fraction=%g asked)%s; the largest group, %r, holds %d rows. Read its figures as "
                    "those rows'; more (smaller) groups, or a split column (data.columns.split), give the share asked",
                    data_cfg.table, name, len(parts[name]), len(rows), len({s.group or s.rel for s in parts[name]}),
                    len(sizes), name, asked, f" and no row of {', '.join(missing)}" if missing else "", largest, most)


def _split_groups(samples: list[Sample], val_fraction: float, test_fraction: float) -> dict[str, list[Sample]]:
    """Whole groups to each split: groups stratified by their most common label, drawn by a hash of their name."""
    rows: dict[str, list[Sample]] = {}
    for s in samples:
        rows.setdefault(s.group or f"\0{s.rel}", []).append(s)  # a row without a group is a group of its own
    by_class: dict[str, list] = {}
    for group, members in rows.items():
        label = min(Counter(m.stratum for m in members).most_common(), key=lambda pair: (-pair[1], pair[0]))[0]
        by_class.setdefault(label, []).append((group, len(members), 0))
    train, val, test = split_flat(by_class, val_fraction, test_fraction)
    return {name: [s for entries in (part or {}).values() for group, _, _ in entries for s in rows[group]]
            for name, part in (("train", train), ("val", val), ("test", test))}


def _file_split(samples: list[Sample], root: Path, class_names: list[str], rule: MaskRule | None) -> FileSplit:
    """The rows' files and labels; a mask each (rule given: data.task=segmentation)."""
    paths = [os.path.join(root, s.rel) for s in samples]
    if rule is not None:
        return MaskedFileSplit(paths, [os.path.join(root, s.mask[0]) for s in samples], rule)
    if samples and not isinstance(samples[0].label, str):  # multilabel: a 0/1 vector a sample
        return FileSplit(paths, label_sets.vectors([s.label for s in samples], class_names))
    index = {name: i for i, name in enumerate(class_names)}
    return FileSplit(paths, [index[s.label] for s in samples])


def _source(table: Path, files: tuple[Path, MaskRule | None], class_names: list[str], *, parts: dict,
            left_out: list) -> Source:
    """`files`: data.root, and how a row's mask is read (None: no masks)."""
    root, rule = files

    def file_split(samples: list[Sample]) -> FileSplit:
        return _file_split(samples, root, class_names, rule)

    listed = sorted({(s.rel, s.size) for part in parts.values() for s in part} |
                    {s.mask for part in parts.values() for s in part if s.mask is not None})
    h = hashlib.sha256(f"{table.stat().st_size}\0{_sha256(table)}\n".encode())
    for rel, size in listed:
        h.update(f"{rel}\0{size}\n".encode())
    fingerprint = h.hexdigest()
    split = {"source": "table", "fingerprint": fingerprint, "names_sizes_fingerprint": fingerprint,
             "fingerprint_covers": "the table's bytes, and each listed file's path and size",
             "class_names": class_names, "root": str(root), "table": str(table),
             **{name: [s.rel for s in parts[name]] for name in ("train", "val")},
             "test": [s.rel for s in parts["test"]] or None, "left_out": [line for line, _, _ in left_out]}
    corners = {name: np.array([s.corner for s in part], np.int64).reshape(-1, 2) for name, part in parts.items()
               if part and part[0].corner is not None}  # data.columns.x and y: a row a patch
    return Source(name=f"table {table.name}", class_names=class_names, train=file_split(parts["train"]),
                  val=file_split(parts["val"]), fingerprint=fingerprint, split=split,
                  names_sizes_fingerprint=fingerprint, test=file_split(parts["test"]) if parts["test"] else None,
                  left_out=left_out, train_weights=np.array([s.weight for s in parts["train"]]), corners=corners)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
