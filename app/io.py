"""Writes that replace their path, never a link's target (atomic, or appends), one writer at a time; reads, URLs."""

from __future__ import annotations

import csv
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from app.errors import DataError

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # s3://, gs://, https://, ...


def app_cache_dir() -> Path:
    """What this machine keeps between runs (the memory probe, slides' masks): `$APP_CACHE_DIR`, else ~/.cache/app."""
    return Path(os.environ.get("APP_CACHE_DIR") or Path.home() / ".cache" / "app")


def is_url(location) -> bool:
    return bool(location) and bool(URL.match(str(location)))


def append_tsv(path: str | os.PathLike, rows) -> None:
    """`rows` appended to a TSV (bad_samples.txt), csv quoting tabs, breaks and quotes so a row stays one line."""
    with open_own(path, "a", encoding="utf-8", newline="") as f:
        csv.writer(f, delimiter="\t", lineterminator="\n").writerows(rows)


def temporary_name(path: Path) -> Path:
    """Where `atomic_write` writes `path` first: hidden, beside it, this process's own."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **open_args) -> Iterator[IO]:
    """An open file that atomically replaces `path` if the block ends without error; else `path` is left as it was."""
    path = Path(path)
    tmp = temporary_name(path)
    try:
        with open(tmp, mode, **open_args) as f:
            yield f
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def open_own(path: str | os.PathLike, mode: str = "a", **open_args) -> IO:
    """`open(path, mode)`, "a" or "w": a link at `path` is replaced first (for "a", by a copy of what it showed)."""
    path = Path(path)
    appending = mode[0] == "a"
    if is_linked(path):
        replace_link_by_copy(path) if appending else path.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if appending else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise DataError(f"{path} became a symbolic link while the app was about to write it; the app writes its own "
                        "files, never a link's target: remove the link, then run the command again.") from None
    return open(fd, mode, **open_args)


def is_linked(path: str | os.PathLike) -> bool:
    """Whether `path` is a symbolic link, or a file with other names (hard links): a write there changes their file."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISLNK(found.st_mode) or (stat.S_ISREG(found.st_mode) and found.st_nlink > 1)


def replace_link_by_copy(path: Path) -> str:
    """The link at `path` (`is_linked`) atomically replaced by a copy of its file (none if it leads nowhere): was."""
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise DataError(f"{path} is a symbolic link to the folder {target}, where the app writes a file: remove the "
                        "link, then run the command again (nothing was written).")
    was = f"a symbolic link to {target}" if path.is_symlink() else \
        f"a hard link (its file has {os.lstat(path).st_nlink - 1} other name(s))"
    with atomic_write(path, "wb") as copy:
        if target.is_file():
            with open(target, "rb") as original:
                shutil.copyfileobj(original, copy)
    logging.getLogger(__name__).info("%s was %s: replaced by a copy of that file, which the app writes from now on "
                                     "(the link's file is left as it was)", path, was)
    return was


def read_regular(path: str | os.PathLike) -> bytes:
    """The bytes of the regular file at `path` (one a config names); an OSError for anything else, never read."""
    # opened without blocking: a pipe would wait for a writer, and a device such as /dev/urandom never ends
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "a folder, not a file", str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file (a pipe, a device or a socket): never read", str(path))
        return f.read()


class OwnFileHandler(logging.FileHandler):
    """A log file (train.log) appended through `open_own`: a link at its path is never written through."""

    def _open(self):
        return open_own(self.baseFilename, self.mode, encoding=self.encoding, errors=self.errors)


def write_picture(path: str | os.PathLike, save, **options) -> None:
    """A PNG atomically at `path`, by `save` (a PIL image's `save`, a Matplotlib figure's `savefig`) with `options`."""
    with atomic_write(path, "wb") as f:
        save(f, format="png", **options)


def write_file(path: str | os.PathLike, data: bytes | str) -> None:
    """`data` (text: UTF-8) atomically at `path`."""
    with atomic_write(path, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


@contextmanager
def held_exclusively(lock_file: Path, waiting: Callable[[], None] = lambda: None) -> Iterator[None]:
    """An exclusive `flock` on `lock_file` (made if missing) for the block; `waiting()` once if another holds it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting()
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def write_json(path: str | os.PathLike, content: Any) -> None:
    """Atomically: readers never see half a file."""
    text = json.dumps(content, indent=2, default=str) + "\n"
    with atomic_write(path, encoding="utf-8") as f:
        f.write(text)


def write_json_over_own(path: str | os.PathLike, content: dict, writer: str) -> None:
    """`write_json`, where a file already at `path` is one `writer` wrote before (`check_own_json`)."""
    check_own_json(path, content, writer)
    write_json(path, content)


def check_own_json(path: str | os.PathLike, keys, writer: str) -> None:
    """A DataError naming `path` where its file is not `writer`'s (a JSON object with `keys`): never overwritten."""
    path = Path(path)
    if path.exists():
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            found = None
        if not isinstance(found, dict) or not set(keys) <= set(found):
            raise DataError(f"{path} is there and is not a file {writer} wrote: move it away (nothing was written "
                            f"over it), then run {writer} again.")
