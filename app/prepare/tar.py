"""One shard, written whole or not at all (staged, then handed to the Store): an uncompressed WebDataset tar."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import tempfile
from pathlib import Path

from app.data.copies.shards import MASK_MEMBER, MEMBER
from app.data.copies.storage import Store
from app.io import temporary_name
from app.prepare.encode import Encoded

# A fixed time and owner: the same samples make the same bytes, whenever and by whom prepared.
MTIME = 0
STAGING = "app-prepare-staging"  # under the system's temporary folder: shards on their way to a URL


def staging_folder(store: Store) -> Path:
    """Where shards for `store` are staged: beside them for a folder, else a temporary folder kept for this URL."""
    if store.local is not None:
        return store.local
    return Path(tempfile.gettempdir()) / STAGING / hashlib.sha256(str(store).encode()).hexdigest()[:16]


class ShardWriter:
    """`with ShardWriter(store, name, fmt) as shard: shard.add(key, encoded)`; `size`, once finished, its bytes."""

    def __init__(self, store: Store, name: str, fmt: str):
        self.store, self.name, self.extension = store, name, MEMBER[fmt]
        self.staged = temporary_name(staging_folder(store) / name)
        self.size = 0

    def __enter__(self) -> ShardWriter:
        self.staged.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.staged, "wb")  # noqa: SIM115 - closed in __exit__, then handed to the store
        self._tar = tarfile.open(fileobj=self._file, mode="w", format=tarfile.USTAR_FORMAT)
        return self

    def add(self, key: str, sample: Encoded) -> tuple[int, int, list[int] | None]:
        """The sample's members; (offset, length) of its image data in the shard, and its mask's [offset, length]."""
        image = self._put(f"{key}.{self.extension}", sample.image) + sample.data_start
        mask = None if sample.mask is None else [self._put(f"{key}.{MASK_MEMBER}", sample.mask), len(sample.mask)]
        label = " ".join(map(str, sample.label)) if isinstance(sample.label, list) else str(sample.label)
        self._tar.addfile(*self._with(f"{key}.cls", label.encode()))
        self._tar.addfile(*self._with(f"{key}.json", sample.meta))
        return image, len(sample.image) - sample.data_start, mask

    def _put(self, name: str, data: bytes) -> int:  # where the member's data starts in the shard
        header_at = self._tar.offset
        info = self._member(name, data)
        header = len(info.tobuf(self._tar.format, self._tar.encoding, self._tar.errors))
        self._tar.addfile(info, io.BytesIO(data))
        return header_at + header

    def __exit__(self, kind, error, trace) -> None:
        """The shard moved into the store; an error (here or in the move) leaves neither it nor a staging file."""
        try:
            self._tar.close()  # the end-of-archive blocks
            self.size = self._file.tell()
            self._file.close()
            if kind is None:
                self.store.put_file_and_delete_it(self.staged, self.name)
        finally:
            self._file.close()
            self.staged.unlink(missing_ok=True)

    def _with(self, name: str, data: bytes) -> tuple[tarfile.TarInfo, io.BytesIO]:
        return self._member(name, data), io.BytesIO(data)

    @staticmethod
    def _member(name: str, data: bytes) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), MTIME, 0o644
        return info


def delete_stale_temporaries(store: Store, names: list[str]) -> int:
    """Delete the partial shards of `names` a killed prepare left in `store`'s staging folder; how many."""
    return delete_stale_temporaries_in(staging_folder(store), names)


def delete_stale_temporaries_in(folder: Path, names: list[str]) -> int:
    """app/io.py's atomic_write's temporaries of `names` in `folder`, of any process: deleted."""
    deleted = 0
    for name in names:
        pattern = temporary_name(Path(folder) / name).name.replace(f".{os.getpid()}.", ".*.")
        for stale in Path(folder).glob(pattern):
            stale.unlink(missing_ok=True)
            deleted += 1
    return deleted
