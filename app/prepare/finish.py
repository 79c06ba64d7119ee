"""What a prepare writes last, each whole or not at all: indexes (labels, places), bad_samples.txt, manifest.json."""

from __future__ import annotations

import csv
import io

import numpy as np

from app.data.copies.shards import (
    BAD_SAMPLES,
    INDEX_DTYPE,
    MANIFEST,
    MASKS_DTYPE,
    PLACE_DTYPE,
    Manifest,
    SplitRecord,
    encoded_manifest,
    index_digest,
    index_path,
    labels_name,
    masks_name,
    places_name,
)
from app.data.copies.storage import Store
from app.prepare.plan import JOURNAL
from app.prepare.tar import delete_stale_temporaries_in
from app.targets import targets_of


def index_of(records: list[dict]) -> np.ndarray:
    """A split's index (INDEX_DTYPE) from its shards' records, in shard order then member order."""
    rows = [(number, row[0], row[1], -1 if isinstance(row[2], list) else row[2], *row[3:5], row[6])
            for number, record in enumerate(records) for row in record["rows"]]
    return np.array(rows, dtype=INDEX_DTYPE) if rows else np.zeros(0, dtype=INDEX_DTYPE)


def labels_of(records: list[dict], classes: int) -> np.ndarray:
    """A multilabel split's labels-<split>.npy: a 0/1 uint8 row a sample in the index's order, from the records."""
    rows = [row[2] for record in records for row in record["rows"]]
    labels = np.zeros((len(rows), classes), np.uint8)
    for i, indices in enumerate(rows):
        labels[i, indices] = 1
    return labels


def masks_of(records: list[dict]) -> np.ndarray:
    """masks-<split>.npy: each sample's mask member's offset, length and CRC32 in the index's order."""
    rows = [tuple(row[8]) for record in records for row in record["rows"]]
    return np.array(rows, dtype=MASKS_DTYPE) if rows else np.zeros(0, dtype=MASKS_DTYPE)


def places_of(records: list[dict], split) -> np.ndarray:
    """patches-<split>.npy: each sample's image and corner in the index's order, from its record's source index."""
    rows = [(image, left, top) for record in records for row in record["rows"]
            for image, top, left in [split.where(row[5])]]
    return np.array(rows, dtype=PLACE_DTYPE) if rows else np.zeros(0, dtype=PLACE_DTYPE)


def kept_nodata(records: dict[str, list[dict]]) -> dict[str, list]:
    """Each split's samples' no-data values in the index's order; {} where no sample has one."""
    kept = {split: [row[7] if len(row) > 7 else None for record in split_records for row in record["rows"]]
            for split, split_records in records.items()}
    return kept if any(value is not None for values in kept.values() for value in values) else {}


def _split_files(records: list[dict], manifest: Manifest, split: str, splits: dict | None) -> dict[str, np.ndarray]:
    """A split's index and the files its copy keeps beside it (labels, places, masks), by name, in writing order."""
    targets = targets_of(manifest.task)
    files = {index_path("", split).name: index_of(records)}
    if targets.label_vectors:
        files[labels_name(split)] = labels_of(records, len(manifest.class_names))
    if manifest.patches:
        files[places_name(split)] = places_of(records, splits[split])
    if targets.masks:
        files[masks_name(split)] = masks_of(records)
    return files


def write_index(store: Store, name: str, index: np.ndarray) -> None:
    """A split's index (or labels) as the .npy `name`, whole or not at all."""
    buffer = io.BytesIO()
    np.save(buffer, index, allow_pickle=False)
    store.write_bytes(name, buffer.getvalue())


def write_bad_samples(store: Store, bad: dict[str, list]) -> str:
    """bad_samples.txt, one row a file left out, as training writes them; returns its path."""
    text = io.StringIO(newline="")
    writer = csv.writer(text, delimiter="\t", lineterminator="\n")
    for split, rows in bad.items():
        for index, where, detail in sorted(rows):
            writer.writerow((split, index, where, detail))
    store.write_bytes(BAD_SAMPLES, text.getvalue().encode("utf-8"))
    return store.path_of(BAD_SAMPLES)


def write_copy_index(store: Store, *, plan: dict, records: dict[str, list[dict]], manifest: Manifest,
                     splits: dict | None = None) -> None:
    """Each split's index, bad_samples.txt, then manifest.json; first deletes what a killed prepare half-wrote."""
    if store.local is not None:  # a kill in the microseconds these and the records take leaves their temporaries
        finals = [name for split in records
                  for name in (index_path("", split).name, labels_name(split), places_name(split), masks_name(split))]
        finals += [BAD_SAMPLES, MANIFEST]
        shards = [shard for planned in plan["splits"].values() for shard in planned["shards"]]
        journal = ["plan.json", *(f"{shard}.json" for shard in shards)]
        delete_stale_temporaries_in(store.local, finals)
        delete_stale_temporaries_in(store.local / JOURNAL, journal)
    bad = {split: [row for record in split_records for row in record["bad"]]
           for split, split_records in records.items()}
    manifest.splits = {}
    for split, split_records in records.items():
        files = _split_files(split_records, manifest, split, splits)
        for name, rows in files.items():
            write_index(store, name, rows)
        digest = {name: index_digest(rows) for name, rows in files.items()}
        manifest.splits[split] = SplitRecord(count=len(files[index_path("", split).name]),
                                             shards=list(plan["splits"][split]["shards"]),
                                             shard_bytes=[r["bytes"] for r in split_records],
                                             index_sha256=digest[index_path("", split).name],
                                             labels_sha256=digest.get(labels_name(split), ""),
                                             places_sha256=digest.get(places_name(split), ""),
                                             masks_sha256=digest.get(masks_name(split), ""))
    manifest.nodata = kept_nodata(records)
    write_bad_samples(store, bad)
    manifest.bad_samples = sum(len(rows) for rows in bad.values())
    store.write_bytes(MANIFEST, encoded_manifest(manifest))  # the same bytes in a folder and at a URL
