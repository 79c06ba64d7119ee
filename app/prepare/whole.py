"""prepare's up-to-date check: what of a finished copy is missing or damaged (manifest, indexes, bad_samples.txt, shard
sizes), each naming its file, so prepare redoes just that; a member damaged in a whole shard is found when read."""

from __future__ import annotations

import numpy as np

from app.data.copies.copy_checks import index_damage, labels_damage, masks_damage
from app.data.copies.shards import (
    BAD_SAMPLES,
    CHECKSUMS_SINCE,
    MANIFEST,
    index_name,
    labels_name,
    masks_name,
    parse_manifest,
    read_index,
    read_labels,
    read_masks,
)
from app.data.copies.storage import Store
from app.errors import DataError
from app.targets import targets_of


def copy_damage(store: Store, plan: dict | None, records: dict[str, dict | None]) -> list[str] | None:
    """None without a finished copy (no plan or manifest); else what is missing or damaged ([]: the copy is whole)."""
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
    if manifest.version < CHECKSUMS_SINCE:
        return [*problems, f"{store.path_of(MANIFEST)} is format version {manifest.version}, without checksums"]
    for split in manifest.splits:
        try:
            damage = index_damage(str(store), manifest, split, _index_in(store, split))
        except DataError:
            damage = f"{store.path_of(index_name(split))} is missing or cannot be read"
        problems += [damage] if damage else []
        targets = targets_of(manifest.task)
        for kept, name, read, damaged in ((targets.label_vectors, labels_name, read_labels, labels_damage),
                                          (targets.masks, masks_name, read_masks, masks_damage)):
            if kept:
                try:
                    damage = damaged(str(store), manifest, split, _in(store, read, split))
                except DataError:
                    damage = f"{store.path_of(name(split))} is missing or cannot be read"
                problems += [damage] if damage else []
    return problems


def _index_in(store: Store, split: str) -> np.ndarray:
    return _in(store, read_index, split)


def _in(store: Store, read, split: str) -> np.ndarray:
    """`read` (read_index, read_labels, read_masks) of `split` in the folder or at the URL of `store`."""
    if store.local is not None:
        return read(store.local, split)
    return read(store.url, split, store.storage_options)
