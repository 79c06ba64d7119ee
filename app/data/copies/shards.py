"""A prepared copy's layout, written by `python -m app prepare`, read by `data=prepared` (URLs: storage.py).
    <split>-<n:05d>.tar  shards of about prepare.shard_mb (WebDataset's layout), samples in one seeded shuffle: members
        `<key>.jpg` (8-bit RGB) or `<key>.npy` (raw: H×W×bands, the manifest's dtype), `<key>.cls` (the label; several:
        class indices, space-separated), `<key>.json` (the original's path and size), keyed `<split>-<index:09d>`
        (no dots: WebDataset splits a name at the first); segmentation: `<key>.seg.png` (the mask, lossless: L, or
        16-bit past 255) right after the image member
    index-<split>.npy    a row a sample in split order (`INDEX_DTYPE`), memory-mapped: shard, offset and length of the
        image data, the label (-1 with several), stored size and the CRC32 of those bytes (checked when read)
    labels-<split>.npy   multilabel copies: a 0/1 uint8 row of classes a sample, in the index's order
    masks-<split>.npy    segmentation copies: offset, length and CRC32 of each sample's mask member (`MASKS_DTYPE`)
    patches-<split>.npy  patch copies (data.patches): each sample's image (in the manifest's `patches.images`) and
        its corner at level 0 (`PLACE_DTYPE`), in the index's order
    manifest.json        written last, whole or not at all (`Manifest`; none: unfinished); `checksum`: the rest's sha256
    bad_samples.txt      the source's files left out, as training lists them"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.data.copies.storage import Store, is_url
from app.errors import DataError
from app.io import atomic_write

# 1: no checksums (no `crc` column, no manifest or index checksum); 2: one label a sample; 3: 8-bit RGB; 4: no
# patches; 5: no masks. All read
FORMAT_VERSION = 6
CHECKSUMS_SINCE = 2  # the format version from which members, indexes and the manifest have checksums
MANIFEST = "manifest.json"
BAD_SAMPLES = "bad_samples.txt"
SPLITS = ("train", "val", "test")
FORMATS = ("jpeg", "raw")
MEMBER = {"jpeg": "jpg", "raw": "npy"}  # the image member's extension, by format
MASK_MEMBER = "seg.png"  # a segmentation copy's mask member's extension
INDEX_DTYPE_1 = np.dtype([("shard", "<u4"), ("offset", "<u8"), ("length", "<u8"), ("label", "<i4"),
                          ("height", "<u4"), ("width", "<u4")])
INDEX_DTYPE = np.dtype([*INDEX_DTYPE_1.descr, ("crc", "<u4")])  # crc: zlib.crc32 of the bytes the row points at
MASKS_DTYPE = np.dtype([("offset", "<u8"), ("length", "<u8"), ("crc", "<u4")])  # a mask member's, in its image's shard
PLACE_DTYPE = np.dtype([("image", "<u4"), ("x", "<u4"), ("y", "<u4")])  # a patch's image and top left at level 0


def shard_name(split: str, number: int) -> str:
    return f"{split}-{number:05d}.tar"


def sample_key(split: str, index: int) -> str:
    """A sample's WebDataset key: its split and its place in the prepared split."""
    return f"{split}-{index:09d}"


def index_name(split: str) -> str:
    return f"index-{split}.npy"


def index_path(root: str | Path, split: str) -> Path:
    return Path(root) / index_name(split)


def labels_name(split: str) -> str:
    return f"labels-{split}.npy"


def masks_name(split: str) -> str:
    return f"masks-{split}.npy"


def places_name(split: str) -> str:
    return f"patches-{split}.npy"


@dataclass(kw_only=True)
class SplitRecord:
    count: int
    shards: list[str] = field(default_factory=list)  # file names under the copy's root, in order
    shard_bytes: list[int] = field(default_factory=list)  # each shard's size; [] in format 1
    index_sha256: str = ""  # `index_digest` of the split's index; "" in format 1
    labels_sha256: str = ""  # `index_digest` of its labels-<split>.npy; "" for one label a sample
    places_sha256: str = ""  # `index_digest` of its patches-<split>.npy; "" for whole images
    masks_sha256: str = ""  # `index_digest` of its masks-<split>.npy; "" without masks


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
    # the prepare command's own overrides (hydra.*, MANIFEST_KEYS and secrets left out): what
    # `prepare_command` gives again, so the advice to prepare a copy again is a command that works
    overrides: list[str] = field(default_factory=list)
    checksum: str = ""  # `manifest_checksum` of every other field; "" in format 1
    task: str = "multiclass"  # multilabel: several labels an image, in labels-<split>.npy
    dtype: str = "uint8"  # the stored images' samples and bands (a raw copy: .npy of H×W×bands; format 4 on)
    bands: int = 3
    # a patch copy's: {"settings": data.patches, "draws": prepare.patch_draws, "images": {split: [path, ...]},
    # "labels": {split: [class, ...]}} (an image's, for its image-level figures); {} for whole images
    patches: dict = field(default_factory=dict)
    # each source file's [size, mtime_ns] as prepared: a copy older than its source is told (copy_checks.py)
    stamps: dict = field(default_factory=dict)
    # a raw copy's: each sample's no-data value (its original's GDAL_NODATA, or null), by split in the index's order;
    # {}: no sample has one
    nodata: dict = field(default_factory=dict)
    ignore_index: int | None = None  # a segmentation copy's data.ignore_index (its classes: class_names)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def manifest_checksum(fields: dict) -> str:
    """The sha256 of a manifest's fields but `checksum` (canonical JSON)."""
    rest = {name: value for name, value in fields.items() if name != "checksum"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def index_digest(index: np.ndarray) -> str:
    """The sha256 of an index's rows (its array data: the same for a mapped file and one in memory)."""
    return hashlib.sha256(np.ascontiguousarray(index).view(np.uint8)).hexdigest()


def encoded_manifest(manifest: Manifest) -> bytes:
    """manifest.json's bytes, with the checksum of the rest: as a folder and a URL both hold it."""
    fields = manifest.to_json()
    fields["checksum"] = manifest_checksum(fields)
    return json.dumps(fields, indent=2).encode("utf-8")


def write_manifest(root: str | Path, manifest: Manifest) -> Path:
    """manifest.json, whole or not at all: the last file a prepare writes."""
    path = Path(root) / MANIFEST
    with atomic_write(path, "wb") as f:
        f.write(encoded_manifest(manifest))
    return path


def manifest_bytes(root: str | Path, storage_options: dict | None = None) -> bytes:
    """manifest.json's bytes, from a folder or a URL; a DataError naming it where missing, or unreadable at a URL."""
    if is_url(root):
        return Store.at(str(root), storage_options).read_bytes(MANIFEST)
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise DataError(f"{path} is missing: {root} is not a prepared copy, or its `python -m app prepare` did "
                        f"not finish (run it again with the same settings: it keeps the shards already written).")
    return path.read_bytes()


def read_manifest(root: str | Path, storage_options: dict | None = None) -> Manifest:
    return parse_manifest(manifest_bytes(root, storage_options), root)


def parse_manifest(raw: bytes, root: str | Path) -> Manifest:
    """The manifest of the copy at `root` from its bytes; a DataError if not one, newer, or failing its checksum."""
    path = f"{str(root).rstrip('/')}/{MANIFEST}"
    try:
        fields = json.loads(raw.decode("utf-8"))
        splits = {name: SplitRecord(**record) for name, record in fields["splits"].items()}
        manifest = Manifest(**{**fields, "splits": splits})
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise DataError(f"{path} cannot be read ({type(error).__name__}: {error}): "
                        f"{prepare_again(root, None)}.") from None
    if manifest.version > FORMAT_VERSION:
        raise DataError(f"{path} is format version {manifest.version}, newer than this app reads "
                        f"({FORMAT_VERSION}): update the app, or prepare the copy again with this one.")
    if (manifest.checksum or manifest.version > 1) and manifest.checksum != manifest_checksum(fields):
        raise DataError(f"{path} does not match its checksum: it was changed after prepare wrote it (its class "
                        f"names, splits, counts or settings), so the samples' labels cannot be trusted; "
                        f"{prepare_again(root, manifest)}.")
    return manifest


# the keys `prepare_command` writes itself, from the manifest
MANIFEST_KEYS = ("data", "data.path", "prepare.out", "prepare.short_side", "prepare.format", "prepare.quality")


def prepare_command(manifest: Manifest | None, out: str, short_side: int | None = None) -> str:
    """The `python -m app prepare` writing `manifest`'s copy into `out` again (`short_side`: at another short side)."""
    if manifest is None:
        return f"python -m app prepare data=<the source> data.path=<its folder> prepare.out={out}"
    side = short_side or ("full" if manifest.short_side is None else manifest.short_side)
    quality = f" prepare.quality={manifest.quality}" if manifest.format == "jpeg" else ""
    others = "".join(f" {shlex.quote(o)}" for o in manifest.overrides)  # MANIFEST_KEYS left out when recorded
    path = manifest.source.get("path")
    return (f"python -m app prepare data={manifest.source.get('name', '<the source>')} "
            f"data.path={shlex.quote(path) if path else '<its folder>'}{others} prepare.out={shlex.quote(out)} "
            f"prepare.short_side={side} prepare.format={manifest.format}{quality}")


def unrecorded(manifest: Manifest | None) -> str:
    """What a `prepare_command` leaves to the user: the overrides a format 1 manifest did not keep."""
    if manifest is not None and manifest.version >= CHECKSUMS_SINCE:  # the overrides are recorded from then on
        return ""
    return " (with any other keys it was prepared with, seed and data.* among them)"


def prepare_again(root: str | Path, manifest: Manifest | None) -> str:
    """What mends a copy missing or damaged in part: its prepare, run again."""
    return (f"run the copy's prepare again, `{prepare_command(manifest, str(root).rstrip('/'))}`"
            f"{unrecorded(manifest)}: it rewrites what is missing or damaged and keeps the rest")


def read_index(root: str | Path, split: str, storage_options: dict | None = None, again: str = "") -> np.ndarray:
    """A split's index, checked (`again`: a refusal's advice): mapped from a folder; from a URL, one GET into memory."""
    path, load = _loader(root, index_name(split), storage_options)
    return check_index(load, path, again)


def read_places(root: str | Path, split: str, storage_options: dict | None = None, again: str = "") -> np.ndarray:
    """A patch copy's patches-<split>.npy in memory; a DataError naming it where missing or not of PLACE_DTYPE."""
    path, load = _loader(root, places_name(split), storage_options)
    return np.array(check_index(load, path, again, dtypes=(PLACE_DTYPE,)))


def read_masks(root: str | Path, split: str, storage_options: dict | None = None, again: str = "") -> np.ndarray:
    path, load = _loader(root, masks_name(split), storage_options)
    return check_index(load, path, again, dtypes=(MASKS_DTYPE,))


def read_labels(root: str | Path, split: str, storage_options: dict | None = None, again: str = "") -> np.ndarray:
    """A multilabel copy's labels-<split>.npy in memory; a DataError naming it where missing or not 2-D uint8."""
    path, load = _loader(root, labels_name(split), storage_options)
    labels = check_index(load, path, again, dtypes=(np.dtype(np.uint8),))
    if labels.ndim != 2:
        raise DataError(f"{path} holds a {labels.ndim}-D array, not a row of 0/1 a sample: "
                        f"{again or 'prepare the copy again'}.")
    return np.array(labels)


def _loader(root: str | Path, name: str, storage_options: dict | None) -> tuple[str, object]:
    """(where, a loader) of the .npy `name` of a copy: mapped from a folder; from a URL, one GET into memory."""
    if is_url(root):
        raw = Store.at(str(root), storage_options).read_bytes(name)
        return f"{str(root).rstrip('/')}/{name}", lambda: np.load(io.BytesIO(raw))
    path = Path(root) / name
    return str(path), lambda: np.load(path, mmap_mode="r")


def check_index(load, path: str | Path, again: str = "", dtypes=(INDEX_DTYPE, INDEX_DTYPE_1)) -> np.ndarray:
    """`load()`'s array, refused (naming `path`) unless it is a prepared copy's index (or of `dtypes`)."""
    again = again or "prepare the copy again"
    try:
        index = load()
    except (OSError, ValueError) as error:
        raise DataError(f"{path} cannot be read ({error}): {again}.") from None
    if index.dtype not in dtypes:
        raise DataError(f"{path} holds {index.dtype}, not a prepared copy's index: {again}.")
    return index
