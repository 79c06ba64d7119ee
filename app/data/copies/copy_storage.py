"""Where a prepared copy's files lie, a folder or a URL, chosen once: its splits read them without asking which."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol

import numpy as np

from app.data.copies.copy_checks import shard_damage, size_in
from app.data.copies.remote_copy import remote_copy
from app.data.copies.shards import Manifest, read_index, read_labels, read_manifest, read_masks, read_places
from app.data.copies.storage import is_url
from app.errors import DataError


class CopyStorage(Protocol):  # a copy's manifest, a split's index, labels, places and masks files, shards' bytes
    manifest: Manifest

    def __str__(self) -> str: ...  # the folder or the URL, as messages name it

    def read(self, shard: str, offset: int, length: int) -> bytearray: ...  # fewer bytes where the shard ends before

    def shard_path(self, shard: str) -> str: ...

    def index(self, split: str, again: str = "") -> np.ndarray: ...  # `again`: a refusal's advice

    def labels(self, split: str, again: str = "") -> np.ndarray: ...

    def places(self, split: str, again: str = "") -> np.ndarray: ...

    def masks(self, split: str, again: str = "") -> np.ndarray: ...  # mapped or fetched once a process, as the index

    def shard_damage(self, manifest: Manifest) -> list[str]: ...  # shards missing or not of the manifest's size


class LocalCopy:
    """A copy in a local folder: its shards read by `pread` on descriptors a process opens once a shard."""

    def __init__(self, folder: str):
        self.folder = folder
        self._shards = _Descriptors()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_shards": None}  # descriptors do not cross processes: each opens its own

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._shards = _Descriptors()

    def __str__(self) -> str:
        return self.folder

    @property
    def manifest(self) -> Manifest:
        return read_manifest(self.folder)  # read when asked: as it is now, and no worker's pickle carries it

    def read(self, shard: str, offset: int, length: int) -> bytearray:
        data = bytearray(length)
        got = os.preadv(self._shards.fd(self.shard_path(shard)), [data], offset)
        del data[got:]
        return data

    def shard_path(self, shard: str) -> str:
        return os.path.join(self.folder, shard)

    def index(self, split: str, again: str = "") -> np.ndarray:
        return read_index(self.folder, split, again=again)

    def labels(self, split: str, again: str = "") -> np.ndarray:
        return read_labels(self.folder, split, again=again)

    def places(self, split: str, again: str = "") -> np.ndarray:
        return read_places(self.folder, split, again=again)

    def masks(self, split: str, again: str = "") -> np.ndarray:
        return read_masks(self.folder, split, again=again)

    def shard_damage(self, manifest: Manifest) -> list[str]:
        return shard_damage(self.folder, manifest, size_in(self.folder))


class _Descriptors:  # a process's open shards, one descriptor each, shared by its threads, closed with the copy
    def __init__(self):
        self.fds: dict[str, int] = {}
        self._lock = threading.Lock()

    def fd(self, path: str) -> int:
        fd = self.fds.get(path)
        if fd is None:
            with self._lock:  # two threads opening one shard: one descriptor
                fd = self.fds.get(path)
                if fd is None:
                    fd = self.fds[path] = os.open(path, os.O_RDONLY)
        return fd

    def __del__(self) -> None:
        for fd in self.fds.values():
            os.close(fd)


def open_copy(data_cfg) -> CopyStorage:
    """The copy at data.path, a URL (a bad URL, credentials or server fail here) or a local folder."""
    if is_url(data_cfg.path):
        return remote_copy(data_cfg)
    root = Path(str(data_cfg.path)).expanduser().absolute()
    if not root.is_dir():
        raise DataError(f"data.path {root} does not exist or is not a folder: data=prepared reads the folder "
                        "that `python -m app prepare ... prepare.out=<folder>` wrote.")
    return LocalCopy(str(root))
