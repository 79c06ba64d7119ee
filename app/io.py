"""Atomic writes (over the app's own files only, where asked), one writer at a time, TSV appends, URL detection."""

from __future__ import annotations

import csv
import fcntl
import json
import os
import re
from collections.abc import Iterator
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
    with open(path, "a", encoding="utf-8", newline="") as f:
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


@contextmanager
def held_exclusively(lock_file: Path) -> Iterator[None]:
    """An exclusive `flock` on `lock_file` (made if missing) for the block, waiting while another process holds it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as lock:
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
