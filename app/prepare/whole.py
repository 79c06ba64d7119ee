"""prepare's up-to-date check: whether the finished copy in a store is whole, and if not, what of
it is missing or damaged, each problem naming the file, so prepare redoes just that: the manifest
(it reads, matches its checksum and is of this format version), each split's index (there, and
matching the checksum and count the manifest records), bad_samples.txt, and each planned shard
(there, at the size its record gives: app/prepare/plan.py's read_record, which also decides
which shards are written again). A member damaged inside a shard of the right size is found
only where it is read (its CRC32, app/data/prepared.py): deleting that shard makes prepare write
it again.
Imports app.data and app.errors only.
"""

from __future__ import annotations

import numpy as np

from app.data.copy_checks import index_damage
from app.data.shards import BAD_SAMPLES, FORMAT_VERSION, MANIFEST, index_name, parse_manifest, read_index
from app.data.storage import Store
from app.errors import DataError


def copy_damage(store: Store, plan: dict | None, records: dict[str, dict | None]) -> list[str] | None:
    """None where there is no finished copy to check (no plan or no manifest: a new or unfinished
    prepare); else what is missing or damaged, [] where the copy is whole. `records`: every
    planned shard's record (None: missing, or not the size it gives)."""
    if plan is None or not store.exists(MANIFEST):
        return None
    problems = [f"{store.path_of(name)} is missing or not the size its record gives"
                for name, record in records.items() if record is None]
    if not store.exists(BAD_SAMPLES):
        problems.append(f"{store.path_of(BAD_SAMPLES)} is missing")
    try:
        manifest = parse_manifest(store.read_bytes(MANIFEST), str(store))
    except DataError:
        return [*problems, f"{store.path_of(MANIFEST)} cannot be read or does not match its checksum"]
    if manifest.version < FORMAT_VERSION:
        return [*problems, f"{store.path_of(MANIFEST)} is format version {manifest.version}, without checksums"]
    for split in manifest.splits:
        try:
            damage = index_damage(str(store), manifest, split, _index_in(store, split))
        except DataError:
            damage = f"{store.path_of(index_name(split))} is missing or cannot be read"
        problems += [damage] if damage else []
    return problems


def _index_in(store: Store, split: str) -> np.ndarray:
    if store.local is not None:
        return read_index(store.local, split)
    return read_index(store.url, split, store.storage_options)
