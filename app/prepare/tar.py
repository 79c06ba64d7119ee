"""One shard, written whole or not at all: a plain (uncompressed) tar in WebDataset's layout,
each sample its `<key>.<jpg|npy>`, `<key>.cls` and `<key>.json` members, and where each image
member's pixels or JPEG bytes start in the file. Written beside its name (app/io.py's
atomic_write) and renamed when complete, so a killed prepare never leaves half a shard under a
shard's name. Imports app.io, app.data.shards and app.prepare.encode only.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from app.data.shards import MEMBER
from app.io import atomic_write, temporary_name
from app.prepare.encode import Encoded

# A fixed time and owner: the same samples make the same bytes, whenever and by whom prepared.
MTIME = 0


class ShardWriter:
    """`with ShardWriter(path, fmt) as shard: shard.add(key, encoded)`: the rows it returns are
    (offset, length) of each image's data in the finished file."""

    def __init__(self, path: Path, fmt: str):
        self.path, self.extension = Path(path), MEMBER[fmt]

    def __enter__(self) -> ShardWriter:
        self._file_context = atomic_write(self.path, "wb")
        self._tar = tarfile.open(fileobj=self._file_context.__enter__(), mode="w", format=tarfile.USTAR_FORMAT)
        return self

    def add(self, key: str, sample: Encoded) -> tuple[int, int]:
        """The sample's three members; (offset, length) of its image data in the shard."""
        header_at = self._tar.offset
        info = self._member(f"{key}.{self.extension}", sample.image)
        header = len(info.tobuf(self._tar.format, self._tar.encoding, self._tar.errors))
        self._tar.addfile(info, io.BytesIO(sample.image))
        self._tar.addfile(*self._with(f"{key}.cls", str(sample.label).encode()))
        self._tar.addfile(*self._with(f"{key}.json", sample.meta))
        return header_at + header + sample.data_start, len(sample.image) - sample.data_start

    def __exit__(self, kind, error, trace) -> None:
        self._tar.close()  # the end-of-archive blocks; an error leaves no shard under its name
        self._file_context.__exit__(kind, error, trace)

    def _with(self, name: str, data: bytes) -> tuple[tarfile.TarInfo, io.BytesIO]:
        return self._member(name, data), io.BytesIO(data)

    @staticmethod
    def _member(name: str, data: bytes) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), MTIME, 0o644
        return info


def delete_stale_temporaries(folder: Path, names: list[str]) -> int:
    """Partial shards a killed prepare left beside `names` (atomic_write's hidden temporaries of
    any process): deleted, as nothing will finish them. Returns how many."""
    deleted = 0
    for name in names:
        pattern = temporary_name(Path(folder) / name).name.replace(f".{os.getpid()}.", ".*.")
        for stale in Path(folder).glob(pattern):
            stale.unlink(missing_ok=True)
            deleted += 1
    return deleted
