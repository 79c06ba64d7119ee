"""A folder of images, one sub-folder a class, split by `val_fraction` or given as train/ and val/.

    <path>/<class>/<image>                              split by val_fraction
    <path>/train/<class>/<image>, <path>/val/<class>/<image>   split given

Images may sit in nested folders under their class folder; hidden files and folders are
ignored. Class names are sorted and the label is the index in that order.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from app.data.images import EXTENSIONS
from app.data.source import FileSplit, Source
from app.errors import DataError

_LAYOUT = ("<path>/<class>/<image> (split by data.val_fraction), or <path>/train/<class>/<image> "
           "and <path>/val/<class>/<image> (split given)")

# (relative path with "/" separators, size in bytes); a class's files sorted by path.
Files = list[tuple[str, int]]


def folder_source(path: str | os.PathLike, val_fraction: float, name: str = "folder") -> Source:
    root = Path(path).expanduser().absolute()
    if not root.is_dir():
        raise DataError(f"data.path {root} does not exist or is not a folder: expected images laid "
                        f"out as {_LAYOUT}.")
    train_dir, val_dir = root / "train", root / "val"
    if train_dir.is_dir() and val_dir.is_dir():
        train = _scan(train_dir, root)
        val = _scan(val_dir, root)
        extra = sorted(set(val) - set(train))
        if extra:
            raise DataError(f"{val_dir / extra[0]} is a validation class that {train_dir} does not "
                            f"have: every class folder in val/ must also be in train/ (train classes: "
                            f"{', '.join(train)}).")
        fraction = None
    else:
        for lone in (train_dir, val_dir):
            if _subfolders(lone):
                raise DataError(f"{lone} holds class folders but its sibling "
                                f"{val_dir if lone == train_dir else train_dir} is missing: a given "
                                f"split needs both {train_dir}/<class>/ and {val_dir}/<class>/; "
                                f"otherwise put class folders directly in {root}.")
        by_class = _scan(root, root)
        train, val = {}, {}
        for cls, files in by_class.items():
            train[cls], val[cls] = split_by_fraction(files, val_fraction)
        fraction = val_fraction

    class_names = sorted(train)
    total = sum(len(f) for f in train.values()) + sum(len(f) for f in val.values())
    if total < 2:
        raise DataError(f"{root} holds only {total} image: at least 2 are needed (one to train on, "
                        f"one to validate), laid out as {_LAYOUT}.")
    if not any(val.values()):
        raise DataError(f"{root} leaves no validation image: no class has 2 or more images, so "
                        f"data.val_fraction={val_fraction} takes none. Add images, or give the split "
                        f"as {root}/train/<class>/ and {root}/val/<class>/.")

    train_split, train_rel = _file_split(root, train, class_names)
    val_split, val_rel = _file_split(root, val, class_names)
    fingerprint = _fingerprint(f for files in (*train.values(), *val.values()) for f in files)
    split = {"source": name, "fingerprint": fingerprint, "class_names": class_names,
             "root": str(root), "train": train_rel, "val": val_rel, "val_fraction": fraction}
    return Source(name, class_names, train_split, val_split, fingerprint, split)


def split_by_fraction(files: Files, val_fraction: float) -> tuple[Files, Files]:
    """One class's files → (train, val), each sorted by path.

    Ordering by sha1 of the relative path (not by name or listing order) keeps the split
    the same on every machine, and adding or removing a file moves few others.
    """
    n = len(files)
    n_val = min(max(1, round(n * val_fraction)), n - 1) if n >= 2 else 0
    ranked = sorted(files, key=lambda f: hashlib.sha1(f[0].encode()).hexdigest())
    return sorted(ranked[n_val:]), sorted(ranked[:n_val])


def _subfolders(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(e.name for e in os.scandir(folder) if e.is_dir() and not e.name.startswith("."))


def _is_image(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(EXTENSIONS)


def _scan(split_dir: Path, root: Path) -> dict[str, Files]:
    """class name → its images under split_dir/<class>/, for every class folder."""
    classes = _subfolders(split_dir)
    if not classes:
        loose = sum(1 for e in os.scandir(split_dir) if e.is_file() and _is_image(e.name))
        hint = f" It holds {loose} images directly: move them into class folders." if loose else ""
        raise DataError(f"{split_dir} has no class folders: expected one sub-folder a class holding "
                        f"its images, e.g. {split_dir}/cat/1.jpg and {split_dir}/dog/2.jpg, laid out "
                        f"as {_LAYOUT}.{hint}")
    out = {}
    for cls in classes:
        files = sorted(_walk(split_dir / cls, root))
        if not files:
            raise DataError(f"class folder {split_dir / cls} has no images: expected files ending in "
                            f"{' '.join(EXTENSIONS)} (any case; hidden files are ignored).")
        out[cls] = files
    return out


def _walk(folder: Path, root: Path):
    for entry in os.scandir(folder):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            yield from _walk(Path(entry.path), root)
        elif entry.is_file() and _is_image(entry.name):
            yield Path(entry.path).relative_to(root).as_posix(), entry.stat().st_size


def _file_split(root: Path, by_class: dict[str, Files], class_names: list[str]):
    rel = [f for cls in class_names for f, _ in by_class.get(cls, [])]
    labels = [i for i, cls in enumerate(class_names) for _ in by_class.get(cls, [])]
    return FileSplit([str(root / r) for r in rel], labels), rel


def _fingerprint(files) -> str:
    h = hashlib.sha256()
    for rel, size in sorted(files):
        h.update(f"{rel}\0{size}\n".encode())
    return h.hexdigest()
