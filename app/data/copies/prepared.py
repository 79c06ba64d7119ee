"""data=prepared: a `prepare` copy (shards.py) in a folder or at a URL (copy_storage.py). Sample i is one read of its
index row's byte range, CRC32-checked (mismatch: a bad sample); a damaged copy is refused at start."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import zlib

import numpy as np
from omegaconf import OmegaConf

from app.data.copies.copy_checks import index_damage, labels_damage, places_damage, stale_copy
from app.data.copies.copy_storage import CopyStorage, open_copy
from app.data.copies.shards import (
    CHECKSUMS_SINCE,
    MANIFEST,
    MEMBER,
    Manifest,
    index_name,
    prepare_again,
    prepare_command,
    sample_key,
    unrecorded,
)
from app.data.pixels import tiff
from app.data.pixels.bands import fit_bands
from app.data.pixels.headers import stored_decode_bytes
from app.data.pixels.images import Decode, DecodeError, rgb_from_bytes
from app.data.source import FileSplit, Source, bad_sample_reason
from app.data.split import Drawn, Place, WholeImages
from app.errors import BadSampleError, DataError
from app.schema.data import DATA_TARGETS, PatchesConfig, PreparedDataConfig, patches_of
from app.targets import targets_of

FINGERPRINT_COVERS = "the prepared copy's manifest: its source's fingerprint, the resize rule and the format"
log = logging.getLogger(__name__)


class PreparedSplit(WholeImages):
    """One split of a prepared copy: rows `rows` of its index (`vectors`: a multilabel copy's labels-<split>.npy)."""

    def __init__(self, root: CopyStorage, split: str, shards: list[str], *, stored: Manifest, vectors=None):
        self.root, self.split, self.shards, self.format = root, split, list(shards), stored.format
        self.dtype, self.bands = stored.dtype, stored.bands  # the stored images' (raw: the .npy's)
        self._nodata = stored.nodata.get(split, [])  # by index row: what each original's no-data value was
        index = root.index(split)
        self.rows = np.arange(len(index), dtype=np.int64)
        self.labels = np.asarray(index["label"], np.int64) if vectors is None else vectors
        self._index: np.ndarray | None = index

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_index": None}  # each process maps the index itself

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, picked: np.ndarray) -> PreparedSplit:
        part = copy.copy(self)  # by __getstate__: the index mapped again when read
        part.rows, part.labels = self.rows[picked], self.labels[picked]
        return part

    def _row(self, i: int):
        if self._index is None:
            self._index = self.root.index(self.split)
        return self._index[self.rows[i]]

    def shard_path(self, shard: int) -> str:
        return self.root.shard_path(self.shards[shard])

    def fetch(self, i: int, decode: Decode | None = None, drawn: Drawn | None = None) -> bytearray:
        """Sample i's stored bytes: one read of its member's range of its shard."""
        self.rows[i]  # an IndexError stays an IndexError
        try:
            row = self._row(i)
            length, shard, offset = int(row["length"]), int(row["shard"]), int(row["offset"])
            data = self.root.read(self.shards[shard], offset, length)
            if len(data) != length:
                raise DecodeError(f"the shard ends {length - len(data)} bytes before the member does (a truncated "
                                  "shard)")
            self._check_crc(row, data)
            return data
        except DataError:
            raise  # storage that cannot be reached: not this sample's fault, never skipped as a bad one
        except Exception as exc:
            raise BadSampleError(i, self.describe(i), bad_sample_reason(exc)) from exc

    def _check_crc(self, row, data: bytearray) -> None:
        """The member's bytes against its row's CRC32 (a format 1 index has none: unchecked)."""
        if "crc" not in row.dtype.names:
            return
        stored, read = int(row["crc"]), zlib.crc32(data)
        if read != stored:
            raise DecodeError(f"its bytes fail their CRC32 check ({read:08x} where {index_name(self.split)} holds "
                              f"{stored:08x}): the shard is damaged; delete it, then {self._mending()}")

    def _mending(self) -> str:
        """The prepare that mends this copy, from its manifest: read only where a member failed."""
        try:
            return prepare_again(self.root, self.root.manifest)
        except DataError:  # the manifest damaged since the start too
            return prepare_again(self.root, None)

    def decode(self, i: int, raw: bytearray, decode: Decode | None = None) -> np.ndarray:
        decode = decode or Decode()
        try:
            if self.format == "raw":
                row = self._row(i)
                shape = (int(row["height"]), int(row["width"]), self.bands)
                if len(raw) != np.prod(shape) * np.dtype(self.dtype).itemsize:
                    raise DecodeError(f"{len(raw)} bytes where the index says {'×'.join(map(str, shape))} {self.dtype}")
                image = np.frombuffer(raw, self.dtype).reshape(shape)  # writable: raw is a bytearray
            else:
                image = rgb_from_bytes(bytes(raw), decode.min_short_side, decode.max_pixels)
            pixels = decode.pixels
            return fit_bands(image, channels=pixels.channels, bands=pixels.bands, dtype=pixels.dtype)
        except Exception as exc:
            raise BadSampleError(i, self.describe(i), bad_sample_reason(exc)) from exc

    def read(self, i: int, decode: Decode | None = None, drawn: Drawn | None = None) -> np.ndarray:
        return self.decode(i, self.fetch(i, decode), decode)

    def describe(self, i: int, drawn: Drawn | None = None) -> str:
        key = sample_key(self.split, int(self.rows[i]))
        return f"{self.shard_path(int(self._row(i)['shard']))} member {key}.{MEMBER[self.format]}"

    def nodata(self, i: int) -> float | None:  # as its original had it: kept by prepare, judged as a file's is
        return tiff.held_nodata(self._nodata[self.rows[i]] if self._nodata else None, self.dtype,
                                f"{self.root} row {i}")

    def largest_decode_bytes(self, decode: Decode) -> tuple[int, int]:  # from the index's sizes alone
        if self._index is None:
            self._index = self.root.index(self.split)
        rows = self._index[self.rows]
        heights, widths = np.asarray(rows["height"], np.int64), np.asarray(rows["width"], np.int64)
        return stored_decode_bytes(heights, widths, decode, jpeg=self.format == "jpeg"), 0


class PreparedPatches(PreparedSplit):
    """A patch copy's split: each sample's image and corner (patches-<split>.npy), its images' paths and labels."""

    def __init__(self, root: CopyStorage, split: str, shards: list[str], *, stored: Manifest, places: np.ndarray):
        super().__init__(root, split, shards, stored=stored)
        kept = stored.patches
        self.places, self.patches = places, patches_config(kept["settings"])
        self.images = FileSplit(list(kept["images"][split]), np.asarray(kept["labels"][split], np.int64))

    @property
    def image_of(self) -> np.ndarray:
        """Each sample's image, an index into `images`."""
        return self.places["image"][self.rows].astype(np.int32)

    def place_of(self, seed: int) -> Place:
        """(index, epoch, draw) → "image:x:y", as a patch run's samples.csv names its patches."""
        def place(i: int, epoch: int, draw: int) -> str:
            row = self.places[self.rows[i]]
            return f"{row['image']}:{row['x']}:{row['y']}"
        return place


def patches_config(settings: dict) -> PatchesConfig:
    """data.patches as a patch copy's manifest keeps it (a key added since: its default)."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PatchesConfig), settings))


def copy_may_move(saved_data) -> bool:
    """Whether a resume may move data.path: a copy is known by its manifest's fingerprint, not its place."""
    return saved_data.get("_target_") == DATA_TARGETS["prepared"]


def run_patches(data_cfg) -> PatchesConfig | None:
    """A run's data.patches: its own, or (data=prepared) its patch copy's; None for whole images."""
    own = patches_of(data_cfg)
    if own is not None or not isinstance(data_cfg, PreparedDataConfig):
        return own
    kept = open_copy(data_cfg).manifest.patches
    return patches_config(kept["settings"]) if kept else None


def prepared_source(data_cfg) -> Source:
    """data=prepared: the copy at data.path (a local folder, or a URL)."""
    root = open_copy(data_cfg)
    manifest = root.manifest
    kept, wanted = targets_of(manifest.task), targets_of(data_cfg.task)
    if kept is not wanted:
        raise DataError(f"{root} holds {kept.kind} (prepared with data.task={kept.task.value}), and this run has "
                        f"data.task={wanted.task.value}: add data.task={kept.task.value}, or prepare a copy from the "
                        f"source with data.task={wanted.task.value}.")
    splits = _checked_splits(root, manifest)
    stale = stale_copy(root, manifest)
    if stale:
        log.warning("%s", stale)
    for name in ("train", "val"):
        if not len(splits.get(name, ())):
            raise DataError(f"{root} has no {name} samples: a prepared copy needs a train and a val split; "
                            "prepare it again from a source with both.")
    rule = {"short_side": manifest.short_side, "format": manifest.format, "quality": manifest.quality}
    fingerprint = hashlib.sha256(json.dumps({"source": manifest.source.get("fingerprint"), **rule},
                                            sort_keys=True).encode()).hexdigest()
    split = {"source": "prepared", "fingerprint": fingerprint, "fingerprint_covers": FINGERPRINT_COVERS,
             "class_names": manifest.class_names, "root": str(root), "prepared": {**rule, "of": manifest.source},
             "counts": {name: len(s) for name, s in splits.items()},
             **({"patches": _patches_described(manifest.patches, splits)} if manifest.patches else {})}
    return Source(name="prepared", class_names=list(manifest.class_names), train=splits["train"], val=splits["val"],
                  fingerprint=fingerprint, split=split, test=splits.get("test"))


def _patches_described(kept: dict, splits: dict) -> dict:
    """split.json's `patches` of a patch copy, as a run on the slides writes it, with the copy's draws."""
    counts = {name: {"images": len(kept["images"][name]), "patches": len(split)} for name, split in splits.items()}
    return {"split_by": "image", "size": kept["settings"]["size"], "mode": kept["settings"]["mode"],
            "draws": kept["draws"], **counts}


def _checked_splits(root: CopyStorage, manifest: Manifest) -> dict[str, PreparedSplit]:
    """Each split of the copy, once its index and (in a folder) shard sizes match the manifest; else a DataError."""
    again, where = prepare_again(root, manifest), str(root).rstrip("/")
    if manifest.version < CHECKSUMS_SINCE:
        log.warning("%s/%s is format version %d: its samples have no checksums, so a damaged one is read "
                    "unchecked; to add them, %s.", where, MANIFEST, manifest.version, again)
    problems = root.shard_damage(manifest)
    splits = {}
    for name, record in manifest.splits.items():
        problems += filter(None, [index_damage(where, manifest, name, root.index(name, again))])
        vectors = None
        if targets_of(manifest.task).label_vectors:
            vectors = root.labels(name, again)
            problems += filter(None, [labels_damage(where, manifest, name, vectors)])
        if manifest.patches:  # each sample's image and corner
            places = root.places(name, again)
            problems += filter(None, [places_damage(where, manifest, name, places)])
            splits[name] = PreparedPatches(root, name, record.shards, stored=manifest, places=places)
        else:
            splits[name] = PreparedSplit(root, name, record.shards, stored=manifest, vectors=vectors)
    if problems:
        raise DataError(f"{'; '.join(problems)}: the copy is damaged; {again}.")
    return splits


def check_short_side(split, need: int | None, what: str) -> None:
    """Refuse, before any work, a prepared split stored below the `need` px of short side that `what` needs."""
    if not isinstance(split, PreparedSplit) or need is None:
        return
    manifest = split.root.manifest
    stored = manifest.short_side
    if stored is None or stored >= need:
        return
    again = f"{split.root}-{need}"
    raise DataError(f"the prepared copy {split.root} stores images at a short side of {stored} px, but {what} "
                    f"need {need} px: training on it would upsample. Prepare a copy for these transforms in a new "
                    f"folder: `{prepare_command(manifest, again, need)}`{unrecorded(manifest)}, then train with "
                    f"data.path={again}; or lower data.image_size.")
