"""Which sample goes where, kept in `<out>/.prepare/plan.json`, and each finished shard's record (`<shard>.json`),
written after it, so a prepare run again keeps each shard at its recorded size and writes the rest."""

from __future__ import annotations

import json
import math
import re

import numpy as np

from app.data.copies.shards import SPLITS, shard_name
from app.data.copies.storage import Store
from app.errors import DataError

JOURNAL = ".prepare"  # the plan and the finished shards' records, under the copy's folder
PLAN = f"{JOURNAL}/plan.json"
TAR_OVERHEAD = 4 * 512  # three members' headers and padding, about
PLAN_TEMPORARY = re.compile(r"^\.plan\.json\.\d+\.tmp$")  # app/io.py's atomic_write's, of any process
# a record's row: offset, length, label, height, width, source index, crc32, no-data value (a row of an earlier app:
# none, read as no value), and a segmentation sample's [mask offset, length, crc32]
ROW_FIELDS = (7, 8, 9)


def record_name(shard: str) -> str:
    return f"{JOURNAL}/{shard}.json"


def shard_orders(count: int, per_shard: int, seed: int, split: str) -> list[np.ndarray]:
    """A split's shards' source indices: one shuffle seeded by (seed, split), cut evenly, at most `per_shard` each."""
    order = np.random.default_rng([seed, SPLITS.index(split)]).permutation(count)
    shards = max(1, math.ceil(count / per_shard))
    return [part for part in np.array_split(order, shards) if len(part)] or [order]


def per_shard(sample_bytes: list[int], shard_mb: int) -> int:
    """How many samples make about `shard_mb` MiB, from the stored size of a few."""
    mean = (sum(sample_bytes) / len(sample_bytes) if sample_bytes else 0) + TAR_OVERHEAD
    return max(1, int(shard_mb * 2**20 // mean))


def make_plan(*, key: dict, counts: dict[str, int], sizes: dict[str, int]) -> dict:
    """The plan: what it is for (`key`: settings and source) and each split's shard names and size."""
    splits = {name: {"count": count, "per_shard": sizes[name],
                     "shards": [shard_name(name, n) for n in range(max(1, math.ceil(count / sizes[name])))]}
              for name, count in counts.items()}
    return {"key": key, "splits": splits}


def read_plan(store: Store, key: dict) -> dict | None:
    """The plan an earlier prepare left in `store` for these settings; None: a new folder; else a DataError."""
    names = store.names()
    if names is None:
        raise DataError(f"prepare.out={store} is a file, not a folder: give a new or empty folder, e.g. "
                        f"prepare.out={store}.prepared.")
    if not names or _holds_no_plan_yet(store, names):
        return None
    path = store.path_of(PLAN)
    try:
        plan = json.loads(store.read_bytes(PLAN)) if store.exists(PLAN) else None
    except (OSError, ValueError):
        plan = None
    if not isinstance(plan, dict):
        raise DataError(f"prepare.out={store} is a folder that holds other files, not a prepared copy (no "
                        f"{path}): give a new or empty folder, so that nothing in it is overwritten.")
    if plan.get("key") != key:
        old = plan.get("key") or {}
        changed = sorted(k for k in set(key) | set(old) if old.get(k) != key.get(k))
        raise DataError(f"prepare.out={store} holds a prepared copy of other settings or another source "
                        f"({', '.join(changed)} differ): prepare into a new folder, or delete {store} first to "
                        "replace it.")
    return plan


def _holds_no_plan_yet(store: Store, names: list[str]) -> bool:
    """The folder holds only the journal of a prepare killed while writing the plan: prepare into it as if new."""
    journal = store.local / JOURNAL if store.local is not None else None
    return (names == [JOURNAL] and journal is not None and journal.is_dir()
            and all(PLAN_TEMPORARY.match(path.name) for path in journal.iterdir()))


def write_plan(store: Store, plan: dict) -> None:
    store.write_bytes(PLAN, json.dumps(plan).encode("utf-8"))


def write_record(store: Store, shard: str, record: dict) -> None:
    """A shard's record, written after it: {"start": its first key number, "rows": [[ROW_FIELDS' comment's], ...],
    "bad": [[source index, where, detail], ...], "source_bytes": n, "bytes": size}"""
    store.write_bytes(record_name(shard), json.dumps(record).encode("utf-8"))


def read_record(store: Store, shard: str) -> dict | None:
    """A shard's record where the shard is whole at its recorded size, else None (so too a record without CRC32s)."""
    if not store.exists(shard) or not store.exists(record_name(shard)):
        return None
    try:
        record = json.loads(store.read_bytes(record_name(shard)))
        whole = all(len(row) in ROW_FIELDS for row in record["rows"]) and store.size(shard) == record["bytes"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if whole else None


def read_records(store: Store, plan: dict) -> dict[str, dict | None]:
    """Every planned shard's record (None where the shard is not finished), by shard name."""
    return {shard: read_record(store, shard) for split in plan["splits"].values() for shard in split["shards"]}


