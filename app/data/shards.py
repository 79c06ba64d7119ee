"""A prepared copy's layout: what `python -m app prepare` writes and `data=prepared` reads.

    <out>/train-00000.tar, train-00001.tar, val-00000.tar, test-00000.tar, ...
        shards of about `prepare.shard_mb` each, in WebDataset's layout: every sample is the
        members `<key>.jpg` (prepare.format=jpeg) or `<key>.npy` (raw: a NumPy file of uint8
        H×W×3), `<key>.cls` (the label, an ASCII integer) and `<key>.json` (the original's path
        and size), its key `<split>-<index:09d>` (no dots: WebDataset splits a member's name at
        the first one). Samples are spread over a split's shards by one seeded shuffle, so no
        shard is one class.
    <out>/index-<split>.npy
        one row a sample of the split, in the prepared split's order (`INDEX_DTYPE`): the shard,
        where the image member's bytes start and how many there are (for raw, the array's data,
        after the .npy header), the label and the stored height and width. Memory-mapped: a
        million samples cost no parse at start, and sample i is found without reading a shard.
    <out>/manifest.json
        written last, whole or not at all (`Manifest`): class names, each split's shards and
        count, the source's fingerprint, the resize rule, the format, and the source's own split
        record (`assignment`: which files or rows are train, val and test, as training's
        split.json records them). A copy without it is unfinished.
    <out>/bad_samples.txt
        the source's files that were left out, as training lists them.

A copy at a URL is read through app/data/storage.py (`read_manifest`, `read_index`).
Imports only the standard library, NumPy, app.errors/app.io and app.data.storage: worker
processes import it.
"""

from __future__ import annotations

import dataclasses
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.data.storage import Store, is_url
from app.errors import DataError
from app.io import atomic_write

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
BAD_SAMPLES = "bad_samples.txt"
SPLITS = ("train", "val", "test")
FORMATS = ("jpeg", "raw")
MEMBER = {"jpeg": "jpg", "raw": "npy"}  # the image member's extension, by format
INDEX_DTYPE = np.dtype([("shard", "<u4"), ("offset", "<u8"), ("length", "<u8"), ("label", "<i4"),
                        ("height", "<u4"), ("width", "<u4")])


def shard_name(split: str, number: int) -> str:
    return f"{split}-{number:05d}.tar"


def sample_key(split: str, index: int) -> str:
    """A sample's WebDataset key: its split and its place in the prepared split."""
    return f"{split}-{index:09d}"


def index_name(split: str) -> str:
    return f"index-{split}.npy"


def index_path(root: str | Path, split: str) -> Path:
    return Path(root) / index_name(split)


@dataclass(kw_only=True)
class SplitRecord:
    count: int
    shards: list[str] = field(default_factory=list)  # file names under the copy's root, in order


@dataclass(kw_only=True)
class Manifest:
    class_names: list[str]
    splits: dict[str, SplitRecord]  # train and val always; test where the source has one
    source: dict  # {"name", "path", "fingerprint"}: what was prepared
    short_side: int | None  # the stored images' short side at most this; None: full size
    format: str  # jpeg | raw
    quality: int | None  # jpeg only
    app_version: str
    version: int = FORMAT_VERSION
    bad_samples: int = 0
    # the source's split record (Source.split, what training writes as split.json): which of its
    # files or rows went to train, val and test. Empty in copies prepared before it was recorded.
    assignment: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def write_manifest(root: str | Path, manifest: Manifest) -> Path:
    """manifest.json, whole or not at all: the last file a prepare writes."""
    path = Path(root) / MANIFEST
    with atomic_write(path, encoding="utf-8") as f:
        json.dump(manifest.to_json(), f, indent=2)
    return path


def manifest_bytes(root: str | Path, storage_options: dict | None = None) -> bytes:
    """manifest.json's bytes, from a folder or a URL (through app/data/storage.py); a DataError
    naming the file when it is missing (an unfinished or wrong folder) or cannot be read."""
    if is_url(root):
        return Store.at(str(root), storage_options).read_bytes(MANIFEST)
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise DataError(f"{path} is missing: {root} is not a prepared copy, or its `python -m app prepare` did "
                        f"not finish (run it again with the same settings: it keeps the shards already written).")
    return path.read_bytes()


def read_manifest(root: str | Path, storage_options: dict | None = None) -> Manifest:
    """The copy's manifest, at a folder or a URL."""
    return parse_manifest(manifest_bytes(root, storage_options), root)


def parse_manifest(raw: bytes, root: str | Path) -> Manifest:
    """The manifest of the copy at `root` from its bytes; a DataError naming it when they are not one."""
    path = f"{str(root).rstrip('/')}/{MANIFEST}"
    try:
        fields = json.loads(raw.decode("utf-8"))
        splits = {name: SplitRecord(**record) for name, record in fields.pop("splits").items()}
        manifest = Manifest(splits=splits, **fields)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise DataError(f"{path} cannot be read ({type(error).__name__}: {error}): prepare the copy again "
                        f"(python -m app prepare ... prepare.out={root}).") from None
    if manifest.version > FORMAT_VERSION:
        raise DataError(f"{path} is format version {manifest.version}, newer than this app reads "
                        f"({FORMAT_VERSION}): update the app, or prepare the copy again with this one.")
    return manifest


def read_index(root: str | Path, split: str, storage_options: dict | None = None) -> np.ndarray:
    """A split's index (INDEX_DTYPE): memory-mapped from a folder; from a URL, fetched whole into
    memory (one GET: a million samples are 36 MB)."""
    if is_url(root):
        path = f"{str(root).rstrip('/')}/{index_name(split)}"
        raw = Store.at(str(root), storage_options).read_bytes(index_name(split))
        return check_index(lambda: np.load(io.BytesIO(raw)), path)
    path = index_path(root, split)
    return check_index(lambda: np.load(path, mmap_mode="r"), path)


def check_index(load, path: str | Path) -> np.ndarray:
    """`load()`'s array, refused (naming `path`) unless it is a prepared copy's index."""
    try:
        index = load()
    except (OSError, ValueError) as error:
        raise DataError(f"{path} cannot be read ({error}): prepare the copy again.") from None
    if index.dtype != INDEX_DTYPE:
        raise DataError(f"{path} holds {index.dtype}, not a prepared copy's index: prepare the copy again.")
    return index
