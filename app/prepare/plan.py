"""Which sample goes where, and what an earlier prepare into the same folder left.

Each split's samples are shuffled once by the seed (so no shard is one class) and cut into
shards of about prepare.shard_mb, from the stored size of a few samples. The plan is kept in
`<out>/.prepare/plan.json` with the settings and the source it is for; each finished shard has
a record beside it (`<shard>.json`: its index rows and its bad samples), written after the
shard, so a killed prepare run again keeps the shards with a record and writes the rest.
Imports the standard library, NumPy, app.io, app.errors and app.data.shards only.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from app.data.shards import MANIFEST, SPLITS, shard_name
from app.errors import DataError
from app.io import atomic_write

JOURNAL = ".prepare"  # the plan and the finished shards' records, under the copy's folder
TAR_OVERHEAD = 4 * 512  # three members' headers and padding, about
PLAN_TEMPORARY = re.compile(r"^\.plan\.json\.\d+\.tmp$")  # app/io.py's atomic_write's, of any process


def journal(out: Path) -> Path:
    return Path(out) / JOURNAL


def shard_orders(count: int, per_shard: int, seed: int, split: str) -> list[np.ndarray]:
    """The source indices of each shard of a split of `count` samples: one shuffle seeded by
    (seed, split), cut into shards of at most `per_shard`, sizes as even as they can be."""
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


def read_plan(out: Path, key: dict) -> dict | None:
    """The plan an earlier prepare into `out` left for the same settings and source; None when
    `out` is new or empty (or a prepare was killed there before its plan was whole). A folder
    holding anything else, or a copy of other settings or another source, is refused: nothing in
    it is overwritten."""
    out = Path(out)
    if not out.exists() or (out.is_dir() and _holds_no_plan_yet(out)):
        return None
    if not out.is_dir():
        raise DataError(f"prepare.out={out} is a file, not a folder: give a new or empty folder, e.g. "
                        f"prepare.out={out}.prepared.")
    path = journal(out) / "plan.json"
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise DataError(f"prepare.out={out} is a folder that holds other files, not a prepared copy (no "
                        f"{path}): give a new or empty folder, so that nothing in it is overwritten.") from None
    if plan.get("key") != key:
        old = plan.get("key") or {}
        changed = sorted(k for k in set(key) | set(old) if old.get(k) != key.get(k))
        raise DataError(f"prepare.out={out} holds a prepared copy of other settings or another source "
                        f"({', '.join(changed)} differ): prepare into a new folder, or delete {out} first to "
                        "replace it.")
    return plan


def _holds_no_plan_yet(out: Path) -> bool:
    """`out` is empty, or holds only the journal of a prepare killed while it wrote the plan (the
    plan's temporary at most): a folder to prepare into as if new."""
    names = [path.name for path in out.iterdir()]
    return not names or (names == [JOURNAL] and journal(out).is_dir()
                         and all(PLAN_TEMPORARY.match(path.name) for path in journal(out).iterdir()))


def write_plan(out: Path, plan: dict) -> None:
    journal(out).mkdir(parents=True, exist_ok=True)
    with atomic_write(journal(out) / "plan.json", encoding="utf-8") as f:
        json.dump(plan, f)


def write_record(out: Path, shard: str, record: dict) -> None:
    """A finished shard's record: {"start": the key number of its first sample, "rows": [[offset,
    length, label, height, width, source index], ...], "bad": [[source index, where, detail], ...],
    "source_bytes": n}. Written after the shard itself."""
    with atomic_write(journal(out) / f"{shard}.json", encoding="utf-8") as f:
        json.dump(record, f)


def read_record(out: Path, shard: str) -> dict | None:
    """A shard's record where the shard is finished (its file and its record both there), else None."""
    if not (Path(out) / shard).is_file():
        return None
    try:
        return json.loads((journal(out) / f"{shard}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_up_to_date(out: Path, plan: dict | None) -> bool:
    """Whether `out` is a finished copy of this plan: its manifest and every shard with its record."""
    if plan is None or not (Path(out) / MANIFEST).is_file():
        return False
    return all(read_record(out, shard) is not None for split in plan["splits"].values() for shard in split["shards"])
