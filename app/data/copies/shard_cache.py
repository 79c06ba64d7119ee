"""data.cache_dir: a disk cache of a URL copy's whole shards and indexes, keyed by URL and manifest, renamed in whole,
least recently used evicted past `max_bytes`. A local write failure is a DataError at once: no retry mends the disk."""

from __future__ import annotations

import errno
import hashlib
import os
import threading
import time
from pathlib import Path

from app.data.copies.storage import AGAIN, RemoteStore
from app.errors import DataError, free_space

TOUCH_EVERY_S = 1.0  # a shard's mtime (its place in the LRU order) is refreshed at most this often
STALE_PART_S = 600.0  # a download's temporary file untouched this long was left by a killed process


def cache_key(url: str, manifest: bytes) -> str:
    """The folder of one copy's shards under cache_dir: the URL and the manifest, hashed."""
    return hashlib.sha256(url.encode() + b"\0" + manifest).hexdigest()[:20]


class _Open:
    """A shard's descriptor, closed when its last reader lets go (never closed or reused under a reading thread)."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDONLY)

    def __del__(self) -> None:
        os.close(self.fd)


class ShardCache:
    """The shards of the copy at `store`, whole under `folder`; every copy's under cache_dir capped at `max_bytes`."""

    def __init__(self, store: RemoteStore, folder: Path, max_bytes: int):
        self.store, self.folder, self.max_bytes = store, Path(folder), int(max_bytes)
        self._open: dict[str, _Open] = {}
        self._touched: dict[str, float] = {}
        self._lock = threading.RLock()

    def __getstate__(self) -> dict:
        # Each process opens its own descriptors.
        return {**self.__dict__, "_open": {}, "_touched": {}, "_lock": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def local_path(self, name: str) -> Path:
        return self.folder / name

    def read(self, name: str, offset: int, length: int) -> bytearray:
        """`length` bytes at `offset` of shard `name` (fewer where it ends before), downloaded first when not here."""
        opened = self._open.get(name) or self._open_downloading(name)
        data = bytearray(length)
        got = os.preadv(opened.fd, [data], offset)
        self._touch_or_forget(name)
        return data[:got] if got != length else data

    def fetched(self, name: str) -> Path:
        """The local path of `name` (a shard or an index), downloaded first when not here."""
        path = self.local_path(name)
        if not path.is_file():
            self._download_and_evict(name)
        return path

    def _open_downloading(self, name: str) -> _Open:
        with self._lock:  # threads share the cache: one download and one descriptor a shard
            opened = self._open.get(name)
            if opened is None:
                opened = self._open[name] = _Open(self.fetched(name))
                self._touched[name] = time.monotonic()
        return opened

    def _download_and_evict(self, name: str) -> None:
        """Stream `name` to a temporary file beside its place and rename it there; then delete the least recently used
        shards past the cap, forgetting this process's descriptors of them. A DataError where this disk refuses it."""
        path = self.local_path(name)
        part = path.with_name(f".{name}.{os.getpid()}.{threading.get_ident()}.part")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.store.download_to(name, part)
            os.replace(part, path)  # a racing process's identical file, replaced whole
        except OSError as error:  # this disk's: the store's errors arrive as DataError
            raise cache_write_error(self.folder.parent, self.store.path_of(name), self.max_bytes, error) from error
        finally:
            part.unlink(missing_ok=True)
        for deleted in delete_least_recently_used(self.folder.parent, self.max_bytes, keep=path):
            if deleted.parent == self.folder:
                self._forget(deleted.name)

    def _touch_or_forget(self, name: str) -> None:
        """Touch the shard's mtime (its LRU place); where another process deleted it, forget its descriptor."""
        now = time.monotonic()
        if now - self._touched.get(name, 0.0) < TOUCH_EVERY_S:
            return
        self._touched[name] = now
        try:
            os.utime(self.local_path(name))
        except FileNotFoundError:
            self._forget(name)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._open.pop(name, None)  # closed once no reader holds it


def cache_write_error(cache_dir: Path, url: str, max_bytes: int, error: OSError) -> DataError:
    """The paragraph for `url` that could not be written into `cache_dir` (data.cache_dir)."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return DataError(f"no space left on the device holding data.cache_dir {cache_dir}{free_space(cache_dir)} while "
                         f"caching {url} ({error.strerror}): free some space there (anything under data.cache_dir "
                         "may be deleted: it is a cache) or set data.cache_dir to a folder on a disk with more room, "
                         f"and data.cache_max_gb (now {max_bytes / 1e9:g}) under the room it has; {AGAIN}.")
    return DataError(f"data.cache_dir {cache_dir} cannot be written while caching {url} ({error.strerror}: "
                     f"{error.filename}): make it a folder you may write on a writable disk, or set data.cache_dir "
                     f"to another one, or to null (each sample then one ranged GET, nothing cached); {AGAIN}.")


def delete_least_recently_used(cache_dir: Path, max_bytes: int, keep: Path) -> list[Path]:
    """Deletes LRU shards under `cache_dir` down to `max_bytes`, never `keep`, and killed downloads; returns them."""
    shards, now = [], time.time()
    for path in cache_dir.glob("*/*"):
        try:
            stat = path.stat()
        except FileNotFoundError:  # deleted by another process meanwhile
            continue
        if path.name.endswith(".part") and now - stat.st_mtime > STALE_PART_S:
            path.unlink(missing_ok=True)
        elif path.suffix == ".tar":
            shards.append((stat.st_mtime, stat.st_size, path))
    total, deleted = sum(size for _, size, _ in shards), []
    for _, size, path in sorted(shards):
        if total <= max_bytes:
            break
        if path != keep:
            path.unlink(missing_ok=True)
            total -= size
            deleted.append(path)
    return deleted
