"""What a prepare writes last, from the finished shards' records: each split's index
(index-<split>.npy), bad_samples.txt (the format training writes: split, index, file, reason,
tab-separated) and manifest.json, each whole or not at all, the manifest last of all; and the
temporaries a prepare killed while writing one of these, a shard's record or the plan left.
Imports NumPy, app.io, app.data.shards, app.prepare.plan and app.prepare.tar only.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from app.data.shards import BAD_SAMPLES, INDEX_DTYPE, MANIFEST, Manifest, SplitRecord, index_path, write_manifest
from app.io import atomic_write
from app.prepare.plan import journal
from app.prepare.tar import delete_stale_temporaries


def index_of(records: list[dict]) -> np.ndarray:
    """A split's index (INDEX_DTYPE) from its shards' records, in shard order then member order."""
    rows = [(number, *row[:5]) for number, record in enumerate(records) for row in record["rows"]]
    return np.array(rows, dtype=INDEX_DTYPE) if rows else np.zeros(0, dtype=INDEX_DTYPE)


def write_index(out: Path, split: str, index: np.ndarray) -> None:
    with atomic_write(index_path(out, split), "wb") as f:
        np.save(f, index, allow_pickle=False)


def write_bad_samples(out: Path, bad: dict[str, list]) -> Path:
    """bad_samples.txt: one row a file left out, as training writes them (csv quotes a field
    only when it holds a tab, newline or quote)."""
    path = Path(out) / BAD_SAMPLES
    with atomic_write(path, encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        for split, rows in bad.items():
            for index, where, detail in sorted(rows):
                writer.writerow((split, index, where, detail))
    return path


def write_copy_index(out: Path, *, plan: dict, records: dict[str, list[dict]], manifest: Manifest) -> None:
    """Each split's index, bad_samples.txt, then manifest.json (`manifest` without its splits and
    bad-sample count, filled in here)."""
    # a kill in the microseconds these files and the records take to write leaves their temporaries
    delete_stale_temporaries(out, [index_path(out, split).name for split in records] + [BAD_SAMPLES, MANIFEST])
    delete_stale_temporaries(journal(out), ["plan.json", *(f"{shard}.json" for planned in plan["splits"].values()
                                                           for shard in planned["shards"])])
    bad = {split: [row for record in split_records for row in record["bad"]]
           for split, split_records in records.items()}
    for split, split_records in records.items():
        write_index(out, split, index_of(split_records))
    write_bad_samples(out, bad)
    manifest.splits = {split: SplitRecord(count=sum(len(r["rows"]) for r in split_records),
                                          shards=list(plan["splits"][split]["shards"]))
                       for split, split_records in records.items()}
    manifest.bad_samples = sum(len(rows) for rows in bad.values())
    write_manifest(out, manifest)
