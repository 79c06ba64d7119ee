"""A copy's indexes (checksum, count) and shard sizes against its manifest, naming files; members: checked on read."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable

import numpy as np

from app.data.copies.shards import (
    MANIFEST,
    Manifest,
    index_digest,
    index_name,
    labels_name,
    masks_name,
    places_name,
    prepare_command,
    unrecorded,
)
from app.data.pixels.images import EXTENSIONS
from app.schema.data import TableDataConfig

SHOWN = 5  # changed files named in a warning; the rest counted
LISTED = -1  # a folder's stamp: [LISTED, digest of what a folder source lists in it]; an older copy's: [size, mtime]


def _changed(path: str, root: str) -> str:
    return f"{path} does not match the checksum {root}/{MANIFEST} records for it (it changed after prepare wrote it)"


def index_damage(root: str, manifest: Manifest, split: str, index: np.ndarray) -> str | None:
    """What is wrong with `split`'s index (`index`, as read) against the manifest; None: nothing."""
    record, path = manifest.splits[split], f"{root}/{index_name(split)}"
    if record.index_sha256 and index_digest(index) != record.index_sha256:
        return _changed(path, root)
    if len(index) != record.count:
        return f"{path} has {len(index)} rows where {root}/{MANIFEST} counts {record.count}"
    return None


def labels_damage(root: str, manifest: Manifest, split: str, labels: np.ndarray) -> str | None:
    """What is wrong with a multilabel copy's labels-<split>.npy (`labels`) against the manifest; None: nothing."""
    record, path = manifest.splits[split], f"{root}/{labels_name(split)}"
    if index_digest(labels) != record.labels_sha256:
        return _changed(path, root)
    if labels.shape != (record.count, len(manifest.class_names)):
        return (f"{path} is {labels.shape[0]}×{labels.shape[1]} where {root}/{MANIFEST} counts {record.count} "
                f"samples of {len(manifest.class_names)} classes")
    return None


def places_damage(root: str, manifest: Manifest, split: str, places: np.ndarray) -> str | None:
    """What is wrong with a patch copy's patches-<split>.npy against the manifest; None: nothing."""
    record = manifest.splits[split]
    return _rows_damage(root, f"{root}/{places_name(split)}", places, (record.places_sha256, record.count))


def masks_damage(root: str, manifest: Manifest, split: str, masks: np.ndarray) -> str | None:
    """What is wrong with a segmentation copy's masks-<split>.npy against the manifest; None: nothing."""
    record = manifest.splits[split]
    return _rows_damage(root, f"{root}/{masks_name(split)}", masks, (record.masks_sha256, record.count))


def _rows_damage(root: str, path: str, rows: np.ndarray, recorded: tuple[str, int]) -> str | None:
    sha256, count = recorded
    if index_digest(rows) != sha256:
        return _changed(path, root)
    if len(rows) != count:
        return f"{path} has {len(rows)} rows where {root}/{MANIFEST} counts {count}"
    return None


def shard_damage(root: str, manifest: Manifest, size_of: Callable[[str], int | None]) -> list[str]:
    """The shards missing (`size_of` gives None) or not the size the manifest records."""
    problems = []
    for record in manifest.splits.values():
        for name, recorded in zip(record.shards, record.shard_bytes, strict=False):  # format 1: no sizes
            size = size_of(name)
            if size is None:
                problems.append(f"{root}/{name} is missing")
            elif size != recorded:
                problems.append(f"{root}/{name} is {size} bytes where {root}/{MANIFEST} records {recorded} "
                                "(cut short or changed)")
    return problems


def size_in(folder: str) -> Callable[[str], int | None]:
    """`shard_damage`'s `size_of` for a copy in a local folder: a stat a shard."""
    def size_of(name: str) -> int | None:
        try:
            return os.stat(os.path.join(folder, name)).st_size
        except FileNotFoundError:
            return None
    return size_of


def source_stamps(splits: dict, data) -> dict[str, list[int]]:
    """By absolute path: each file of `splits` and the table [size, mtime_ns]; a source folder [LISTED, digest]."""
    files = [os.path.abspath(path) for split in splits.values() for path in split.files()]
    table = data.table if isinstance(data, TableDataConfig) else None
    if table:
        files.append(os.path.abspath(os.path.expanduser(str(table))))
    elif data.path and os.path.isdir(os.path.expanduser(str(data.path))):  # data=folder: its folders too
        root = os.path.abspath(os.path.expanduser(str(data.path)))
        files += sorted({folder for path in files for folder in _folders(path, root)})
    stamps = {}
    for path in files:
        try:
            found = os.stat(path)
            folder = stat.S_ISDIR(found.st_mode)
            stamps[path] = [LISTED, _listed(path)] if folder else [found.st_size, found.st_mtime_ns]
        except (OSError, ValueError):  # a URL, a broken link: not a file this machine can stamp
            continue
    return stamps


def _listed(folder: str) -> int:
    """A digest of the image files' and folders' names a folder source sees in `folder` (a hidden file: none)."""
    with os.scandir(folder) as entries:
        names = sorted(e.name + "/" * e.is_dir() for e in entries
                       if not e.name.startswith(".") and (e.is_dir() or e.name.lower().endswith(EXTENSIONS)))
    return int.from_bytes(hashlib.sha256("\n".join(names).encode()).digest()[:7], "big")


def _folders(path: str, root: str) -> list[str]:
    """The folders from `root` down to `path`'s own ([] for a path outside it: a test folder elsewhere)."""
    if os.path.commonpath([path, root]) != root:
        return []
    folders, folder = [], os.path.dirname(path)
    while len(folder) >= len(root):
        folders.append(folder)
        folder = os.path.dirname(folder)
    return folders


def _relisted(folder: str, first: int, second: int) -> bool:
    """Whether `folder` lists otherwise than its stamp ([LISTED, digest]; an older copy's [size, mtime]) says."""
    try:
        return _listed(folder) != second if first == LISTED else os.stat(folder).st_mtime_ns != second
    except OSError:  # gone or unreadable since: no change to tell
        return False


def stale_copy(root, manifest: Manifest) -> str | None:
    """The source files changed since prepare, and the fresh copy's command; None: none (a file gone is no change)."""
    changed = []
    for path, (size, mtime_ns) in manifest.stamps.items():
        try:
            found = os.stat(path)
        except OSError:
            continue
        if stat.S_ISDIR(found.st_mode) and _relisted(path, size, mtime_ns):
            changed.append(f"{path}/ (files added, removed or renamed since)")
        elif (found.st_size, found.st_mtime_ns) != (size, mtime_ns) and not stat.S_ISDIR(found.st_mode):
            changed.append(f"{path} ({size:,} → {found.st_size:,} bytes)" if found.st_size != size else
                           f"{path} (modified since)")
    if not changed:
        return None
    more = f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else ""
    root, fresh = str(root).rstrip("/"), f"{str(root).rstrip('/')}-fresh"
    return (f"the prepared copy {root} is older than its source: {len(changed)} of its source files changed after it "
            f"was prepared: {', '.join(changed[:SHOWN])}{more}. This run reads the pixels prepared before; to train on "
            f"the new ones, prepare a fresh copy, `{prepare_command(manifest, fresh)}`{unrecorded(manifest)}, then "
            f"train with data.path={fresh}.")
