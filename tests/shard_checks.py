"""Checks of a prepared copy (app/data/copies/shards.py's layout) as readers other than data=prepared see
it: a shard under its final name is a whole tar (`tarfile`, the end-of-archive blocks there) whose
members are what its record or the index says, and WebDataset's own reader yields the samples,
labels, metas and images the index and data=prepared's reader give."""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import numpy as np
import webdataset as wds

from app.data.copies.shards import MEMBER, read_index, read_manifest, sample_key
from app.data.sources.chosen import load_or_generate_source
from app.schema.data import PreparedDataConfig

SHARD = re.compile(r"^(train|val|test)-\d{5}\.tar$")
BLOCK = 512


def prepared_data(root: Path) -> PreparedDataConfig:
    """data=prepared's config keys for the copy at `root`, as load_or_generate_source reads them."""
    return PreparedDataConfig(path=str(root))


def tar_members(path: Path) -> dict[str, tuple[int, int]]:
    """{member name: (where its data starts, its size)} of a whole tar; an AssertionError where
    the file ends before its end-of-archive blocks (two zero blocks after the last member)."""
    with tarfile.open(path) as tar:
        members = {m.name: (m.offset_data, m.size) for m in tar.getmembers()}
    data = path.read_bytes()
    last = max(start + -(-size // BLOCK) * BLOCK for start, size in members.values())
    assert len(data) % BLOCK == 0 and len(data) - last >= 2 * BLOCK, f"{path} ends without its end-of-archive"
    assert not data[last:].strip(b"\0"), f"{path} holds bytes after its last member"
    return members


def image_ranges(path: Path, fmt: str) -> dict[str, tuple[int, int]]:
    """{image member: (where its stored pixels or JPEG bytes start in the file, how many)}: a raw
    member's pixels start after its .npy header."""
    ranges = {}
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            if not member.name.endswith(f".{MEMBER[fmt]}"):
                continue
            length = member.size
            if fmt == "raw":
                length = np.load(io.BytesIO(tar.extractfile(member).read()), allow_pickle=False).nbytes
            ranges[member.name] = (member.offset_data + member.size - length, length)
    return ranges


def assert_shard_holds(path: Path, keys: list[str], ranges: list[tuple[int, int]], fmt: str) -> None:
    """The whole tar at `path` holds `<key>.<image>`, `<key>.cls` and `<key>.json` for each of
    `keys` and nothing else, each image's data at its (offset, length) of `ranges`."""
    members = tar_members(path)
    assert sorted(members) == sorted(f"{k}.{ext}" for k in keys for ext in (MEMBER[fmt], "cls", "json")), path
    wanted = {f"{key}.{MEMBER[fmt]}": (int(at), int(length)) for key, (at, length) in zip(keys, ranges, strict=True)}
    assert image_ranges(path, fmt) == wanted, path


def assert_webdataset_reads_what_the_index_says(root: Path) -> int:
    """Every split's shards through `webdataset.WebDataset` (its own tar reader and decoders),
    against the index and data=prepared's reader: the keys in order, the .cls labels, the .json
    metas, the images. Returns how many samples were compared."""
    manifest, source = read_manifest(root), load_or_generate_source(prepared_data(root))
    image = MEMBER[manifest.format]
    compared = 0
    for split, record in manifest.splits.items():
        index, reader = read_index(root, split), getattr(source, split)
        urls = [str(root / name) for name in record.shards]
        samples = list(wds.WebDataset(urls, shardshuffle=False).decode("rgb8"))
        assert [s["__key__"] for s in samples] == [sample_key(split, i) for i in range(record.count)]
        for i, sample in enumerate(samples):
            row = index[i]
            assert urls[row["shard"]] == sample["__url__"]
            assert sample["cls"] == row["label"] == reader.labels[i]
            assert sample["json"]["label"] == row["label"]
            assert sample["json"]["stored_size"] == [row["height"], row["width"]]
            assert np.array_equal(np.asarray(sample[image]), reader.read(i)), (split, i)
            compared += 1
        if len(samples) > 1:  # negative control: another sample's image differs
            assert not np.array_equal(np.asarray(samples[0][image]), reader.read(1))
    return compared


def assert_complete_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))  # a half-written file does not parse
