"""A prepared copy at a URL (data.path=s3://...): its shards read by ranged GETs or from shard_cache.py's cache."""

from __future__ import annotations

import io
import threading
from functools import partial
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from app.data.copies.shard_cache import ShardCache, cache_key
from app.data.copies.shards import (
    INDEX_DTYPE,
    INDEX_DTYPE_1,
    MANIFEST,
    MASKS_DTYPE,
    check_index,
    index_name,
    masks_name,
    parse_manifest,
    read_labels,
    read_places,
)
from app.data.copies.storage import RemoteStore, Store
from app.errors import DataError

GB = 10**9  # data.cache_max_gb's unit
TAR_BLOCK = 512  # a tar member's header: every shard starts with one
_indexes: dict[tuple, np.ndarray] = {}  # a URL copy's indexes and masks files, once a process: (key, name, cached)
_indexes_lock = threading.Lock()


class RemoteCopy:
    """A prepared copy at a URL: its store, manifest, `key` (cache_key's) and shard cache (None: ranged GETs only)."""

    def __init__(self, store: RemoteStore, manifest: bytes, cache_dir: Path | None, cache_max_gb: float):
        self.store, self.manifest = store, parse_manifest(manifest, store.url)
        self.key = cache_key(store.url, manifest)
        self.cache = None if cache_dir is None else ShardCache(store, cache_dir / self.key, int(cache_max_gb * GB))

    def __str__(self) -> str:
        return str(self.store)

    def index(self, split: str, again: str = "") -> np.ndarray:
        """The split's index, fetched once a process (in memory, or mapped from the cache); `again`: refusal advice."""
        return self._once(index_name(split), again, (INDEX_DTYPE, INDEX_DTYPE_1))

    def masks(self, split: str, again: str = "") -> np.ndarray:
        return self._once(masks_name(split), again, (MASKS_DTYPE,))

    def _once(self, name: str, again: str, dtypes: tuple) -> np.ndarray:
        with _indexes_lock:
            table = _indexes.get((self.key, name, self.cache is not None))
            if table is None:
                if self.cache is None:
                    load = partial(np.load, io.BytesIO(self.store.read_bytes(name)))
                else:
                    load = partial(np.load, self.cache.fetched(name), mmap_mode="r")
                table = _indexes[(self.key, name, self.cache is not None)] = check_index(
                    load, self.store.path_of(name), again, dtypes=dtypes)
        return table

    def read(self, shard: str, offset: int, length: int) -> bytearray:
        """`length` bytes at `offset` of `shard` (fewer where it ends before)."""
        if self.cache is not None:
            return self.cache.read(shard, offset, length)
        return bytearray(self.store.read_range(shard, offset, length))

    def shard_path(self, shard: str) -> str:
        return self.store.path_of(shard)

    def labels(self, split: str, again: str = "") -> np.ndarray:
        return read_labels(self.store.url, split, self.store.storage_options, again)

    def places(self, split: str, again: str = "") -> np.ndarray:
        return read_places(self.store.url, split, self.store.storage_options, again)

    def shard_damage(self, manifest) -> list[str]:
        return []  # a shard at a URL is not listed at start: one cut short is a bad sample as it is read


def remote_copy(data_cfg) -> RemoteCopy:
    """The copy at URL data.path, its manifest and a byte range read: a bad URL, credentials or server fail here."""
    options = data_cfg.storage_options
    options = OmegaConf.to_container(options, resolve=True) if isinstance(options, DictConfig) else options
    store = Store.at(str(data_cfg.path), options)
    cache_dir = None if data_cfg.cache_dir is None else Path(str(data_cfg.cache_dir)).expanduser().absolute()
    copy = RemoteCopy(store, store.read_bytes(MANIFEST), cache_dir, data_cfg.cache_max_gb)
    first = next((record.shards[0] for record in copy.manifest.splits.values() if record.shards), None)
    if first is not None:
        head = store.read_range(first, 0, TAR_BLOCK)
        if len(head) != TAR_BLOCK:
            raise DataError(f"{store.path_of(first)}: asked for its first {TAR_BLOCK} bytes, got {len(head)}: the "
                            "server does not answer byte ranges (HTTP Range requests), or the shard is cut short. "
                            "Serve the copy from a server that does, or from object storage (s3://, gs://).")
    return copy
