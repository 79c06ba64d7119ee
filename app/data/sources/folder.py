"""A folder of images, one sub-folder a class (images may nest; hidden files ignored; labels index the sorted names):
    <path>/<class>/<image>                                     split by val_fraction (and test_fraction)
    <path>/train/<class>/<image>, <path>/val/<class>/<image>   split given
    <path>/test/<class>/ (split given), data.test_path/<class>/ or data.test_fraction: the test split (evaluate only)"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from app.data.pixels.images import EXTENSIONS
from app.data.source import FileSplit, Source
from app.data.sources.app_outputs import is_app_output
from app.errors import DataError

_LAYOUT = ("<path>/<class>/<image> (split by data.val_fraction), or <path>/train/<class>/<image> "
           "and <path>/val/<class>/<image> (split given)")

# (relative path with "/" separators, size in bytes, modification time in whole seconds);
# a class's files sorted by path.
Files = list[tuple[str, int, int]]
log = logging.getLogger(__name__)
# What split.json's fingerprint covers (docs/troubleshooting.md: "the data changed since …").
FINGERPRINT_COVERS = "relative paths, sizes and modification times (to the second)"


@dataclass(frozen=True)
class Held:
    """Where a folder's test split comes from: data.test_path or data.test_fraction (<path>/test/ needs neither)."""

    path: str | None = None
    fraction: float = 0.0


def folder_source_of(data_cfg) -> Source:
    return folder_source(data_cfg.path, data_cfg.val_fraction,
                         test=Held(data_cfg.test_path, data_cfg.test_fraction))


def folder_source(path: str | os.PathLike, val_fraction: float, name: str = "folder", *, times: bool = True,
                  test: Held = Held()) -> Source:
    """`times=False`: modification times stay out of the fingerprint (generated data: the same bytes whenever made)."""
    try:
        return _source(path, val_fraction, name, times=times, test=test)
    except PermissionError as error:  # a folder the scan cannot list (an image is the loader's to report)
        locked = _first_locked(Path(error.filename))
        raise DataError(f"{locked} cannot be read ({error.strerror}): every folder under data.path {path}"
                        f"{f' and data.test_path {test.path}' if test.path else ''} must be readable by the user "
                        f"running the app. Give it read access (its owner can run `chmod -R a+rX {locked}`), "
                        "or move it out.") from None


def _first_locked(path: Path) -> Path:
    """The outermost folder on `path` that cannot be listed and entered (access to one below it mends nothing)."""
    return next((p for p in (*reversed(path.parents), path) if not os.access(p, os.R_OK | os.X_OK)), path)


def _source(path, val_fraction: float, name: str, *, times: bool, test: Held) -> Source:
    if test.fraction and test.path:
        raise DataError(f"data.test_fraction={test.fraction} and data.test_path={test.path} both name a test "
                        "split: keep one.")
    root = Path(path).expanduser().absolute()
    if not root.is_dir():
        raise DataError(f"data.path {root} does not exist or is not a folder: expected images laid "
                        f"out as {_LAYOUT}.")
    train, val, held_out, fraction = _layout(root, val_fraction, test.fraction)
    class_names = sorted(train)
    if len(class_names) < 2:
        where = root / "train" if fraction is None else root
        raise DataError(f"{where} has one class folder ({class_names[0]}): a classifier needs at least 2 "
                        f"classes, each a sub-folder of its images (e.g. {where}/cat/ and {where}/dog/).")
    if not any(val.values()):
        raise DataError(f"{root} leaves no validation image: no class has 2 or more images, so "
                        f"data.val_fraction={val_fraction} takes none. Add images, or give the split "
                        f"as {root}/train/<class>/ and {root}/val/<class>/.")

    train_split, train_rel = _file_split(root, train, class_names)
    val_split, val_rel = _file_split(root, val, class_names)
    every = [f for files in (*train.values(), *val.values()) for f in files]
    digest, names_sizes = fingerprint(every, times=times), fingerprint(every, times=False)
    covers = FINGERPRINT_COVERS if times else "relative paths and sizes (generated data)"
    split = {"source": name, "fingerprint": digest, "fingerprint_covers": covers,
             "names_sizes_fingerprint": names_sizes, "class_names": class_names,
             "root": str(root), "train": train_rel, "val": val_rel, "val_fraction": fraction}
    if held_out:
        test_split = _file_split(root, held_out, class_names)[0]
    else:
        # data.test_path when named; else <path>/test/ beside train/ and val/ (in the flat layout, a class)
        given = test.path or (root / "test" if fraction is None and (root / "test").is_dir() else None)
        test_split = _test_split(given, class_names)
    split["test"] = test_split.paths if test_split else None
    split["test_fraction"] = test.fraction if held_out else None
    return Source(name=name, class_names=class_names, train=train_split, val=val_split, fingerprint=digest,
                  split=split, names_sizes_fingerprint=names_sizes, test=test_split)


def _layout(root: Path, val_fraction: float, test_fraction: float):
    """(train, val, test or None, val_fraction or None where the split is given), each class → its files."""
    train_dir, val_dir = root / "train", root / "val"
    if train_dir.is_dir() and val_dir.is_dir():
        owners: dict = {}  # one file in train/ and val/ (a link, a hard link) is refused as in two classes
        train = _scan(train_dir, root, owners)
        val = _scan(val_dir, root, owners)
        extra = sorted(set(val) - set(train))
        if extra:
            raise DataError(f"{val_dir / extra[0]} is a validation class that {train_dir} does not "
                            f"have: every class folder in val/ must also be in train/ (train classes: "
                            f"{', '.join(train)}).")
        if test_fraction:
            raise DataError(f"data.test_fraction={test_fraction} draws the test split from the flat layout "
                            f"<path>/<class>/, but {root} gives the split as train/ and val/: put the test "
                            f"images in {root}/test/<class>/ or give data.test_path, and set data.test_fraction=0.")
        return train, val, None, None
    for lone in (train_dir, val_dir):
        if _subfolders(lone):
            raise DataError(f"{lone} holds class folders but its sibling "
                            f"{val_dir if lone == train_dir else train_dir} is missing: a given "
                            f"split needs both {train_dir}/<class>/ and {val_dir}/<class>/; "
                            f"otherwise put class folders directly in {root}.")
    return *split_flat(_scan(root, root), val_fraction, test_fraction), val_fraction


def split_flat(by_class: dict[str, Files], val_fraction: float, test_fraction: float):
    """(train, val, test) of each class: test_fraction first, then val_fraction of the whole from the rest."""
    train, val, test = {}, {}, {}
    for cls, files in by_class.items():
        rest, test[cls] = split_by_fraction(files, test_fraction) if test_fraction else (files, [])
        train[cls], val[cls] = split_by_fraction(rest, val_fraction / (1 - test_fraction))
    return train, val, (test if test_fraction else None)


def _test_split(test_path: str | os.PathLike | None, class_names: list[str]) -> FileSplit | None:
    """<test_path>/<class>/: the test split, its classes training's."""
    if not test_path:
        return None
    folder = Path(test_path).expanduser().absolute()
    if not folder.is_dir():
        raise DataError(f"data.test_path {folder} does not exist or is not a folder: expected "
                        f"{folder}/<class>/<image> with the training classes ({', '.join(class_names)}).")
    by_class = _scan(folder, folder)
    extra = sorted(set(by_class) - set(class_names))
    if extra:
        raise DataError(f"{folder / extra[0]} is a test class that training does not have (training classes: "
                        f"{', '.join(class_names)}).")
    return _file_split(folder, by_class, class_names)[0]


def split_by_fraction(files: Files, val_fraction: float) -> tuple[Files, Files]:
    """One class's files → (train, val) by sha1 of their paths: the same on every machine, stable as files change."""
    n = len(files)
    n_val = min(max(1, round(n * val_fraction)), n - 1) if n >= 2 else 0
    ranked = sorted(files, key=lambda f: hashlib.sha1(f[0].encode()).hexdigest())
    return sorted(ranked[n_val:]), sorted(ranked[:n_val])


def _subfolders(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(e.name for e in os.scandir(folder)
                  if not e.name.startswith(".") and _is_class_dir(e) and not is_app_output(Path(e.path)))


def _is_class_dir(entry: os.DirEntry) -> bool:
    """A folder, or a link to one; a link in a loop is named (a class folder it may have been meant to be)."""
    try:
        return entry.is_dir()
    except OSError as error:
        raise DataError(f"{entry.path} is a symbolic link that cannot be followed ({error.strerror}): remove it, "
                        "or point it at a folder of images.") from None


def _is_image(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(EXTENSIONS)


def _scan(split_dir: Path, root: Path, owners: dict | None = None) -> dict[str, Files]:
    """class name → its images under split_dir/<class>/; a file reached under two class folders refused (_owned)."""
    owners = {} if owners is None else owners  # (device, inode) → (class folder, path) that reached it first
    classes = _subfolders(split_dir)
    if not classes:
        loose = sum(1 for e in os.scandir(split_dir) if _is_image(e.name) and not _is_dir(e))
        hint = f" It holds {loose} images directly: move them into class folders." if loose else ""
        raise DataError(f"{split_dir} has no class folders: expected one sub-folder a class holding "
                        f"its images, e.g. {split_dir}/cat/1.jpg and {split_dir}/dog/2.jpg, laid out "
                        f"as {_LAYOUT}.{hint}")
    out = {}
    for cls in classes:
        files = sorted(_owned(_walk(split_dir / cls, root, EXTENSIONS), owners, split_dir / cls, root))
        if not files:
            raise DataError(f"class folder {split_dir / cls} has no images: expected files ending in "
                            f"{' '.join(EXTENSIONS)} (any case; hidden files are ignored).")
        out[cls] = files
    return out


def images_under(folder: Path, root: Path, suffixes: tuple[str, ...] = EXTENSIONS) -> Files:
    """Every image (file of `suffixes`) under `folder` (links followed, one file reached twice refused), paths
    relative to `root`."""
    return sorted(_owned(_walk(folder, root, suffixes), {}, folder, root))


def _walk(folder: Path, root: Path, suffixes: tuple[str, ...], above: frozenset = frozenset()):
    """The images under `folder`, following links; `above` (folders leading here, as device and inode) stops a loop."""
    here = folder.stat()
    key = (here.st_dev, here.st_ino)
    if key in above:  # named by its link: x/up -> .. shows up as x/up/x, which is no link itself
        link = next((p for p in (folder, *folder.parents) if p.is_symlink()), folder)
        raise DataError(f"{link} is a symbolic link loop (it leads back to {link.resolve()}, a folder "
                        f"above it): remove the link, or point it outside {root}.")
    for entry in os.scandir(folder):
        if entry.name.startswith("."):
            continue
        if _is_dir(entry):
            yield from _walk(Path(entry.path), root, suffixes, above | {key})
        elif entry.name.lower().endswith(suffixes) and (entry.is_symlink() or entry.is_file()):
            rel = Path(entry.path).relative_to(root).as_posix()
            _check_name(rel, root)
            yield rel, *_size_time_and_file(entry)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # a link in a loop (ELOOP): not a folder; if it is named as an image, a bad sample
        return False


def _size_time_and_file(entry: os.DirEntry) -> tuple[int, int, tuple[int, int] | None]:
    """An image's size, mtime and (device, inode); (-1, 0, None) for a broken link: the loader's to report as bad."""
    try:
        stat = entry.stat()
    except OSError:
        return -1, 0, None
    return stat.st_size, int(stat.st_mtime), (stat.st_dev, stat.st_ino)


def _owned(found, owners: dict, class_dir: Path, root: Path):
    """`found`'s (rel, size, mtime); a file reached twice (a link, a hard link) is refused, naming both paths."""
    for rel, size, mtime, file in found:
        first_dir, first = owners.setdefault(file, (class_dir, rel)) if file is not None else (class_dir, rel)
        if first != rel:
            raise DataError(f"{root / rel} and {root / first} are one file ({_how(class_dir, first_dir)})"
                            f"{_twice(class_dir, first_dir, root)}. Remove the link, or keep each image once.")
        yield rel, size, mtime


def _how(class_dir: Path, first_dir: Path) -> str:
    link = next((p for p in (class_dir, first_dir) if p.is_symlink()), None)
    return f"{link} is a link to {link.resolve()}" if link else "a link or a hard link"


def _twice(class_dir: Path, first_dir: Path, root: Path) -> str:
    if class_dir == first_dir:  # its two names may be drawn into two splits
        return (f": it is listed twice in class folder {class_dir}, and its two names may land in different splits, "
                "validating on a training image")
    if class_dir.name == first_dir.name:
        return (f": it is in both splits of class {class_dir.name}, {first_dir.parent.relative_to(root)}/ and "
                f"{class_dir.parent.relative_to(root)}/: validation would score an image trained on")
    return f", under two class folders, {first_dir} and {class_dir}: it would be a sample of both classes"


def _check_name(rel: str, root: Path) -> None:
    """File names are bytes on Linux; one that is not UTF-8 cannot go into split.json or a log as text."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(rel).decode("utf-8", "backslashreplace")
        raise DataError(f"{root}/{shown} has a file name that is not valid UTF-8 (the bytes shown as \\x..): "
                        "rename it (e.g. `convmv -f latin1 -t utf8 --notest -r <folder>`) or move it out of "
                        "data.path.") from None


def _file_split(root: Path, by_class: dict[str, Files], class_names: list[str]):
    rel = [f[0] for cls in class_names for f in by_class.get(cls, [])]
    labels = [i for i, cls in enumerate(class_names) for _ in by_class.get(cls, [])]
    return FileSplit([str(root / r) for r in rel], labels), rel


def fingerprint(files: Files, *, times: bool) -> str:
    """sha256 over every file's relative path, size and (with `times`) modification time."""
    h = hashlib.sha256()
    for rel, size, mtime in sorted(files):
        h.update((f"{rel}\0{size}\0{mtime}\n" if times else f"{rel}\0{size}\n").encode())
    return h.hexdigest()
