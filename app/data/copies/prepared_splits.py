"""A prepared copy's splits: sample i is one read of its index row's byte range, CRC32-checked (a mismatch: a bad
sample); a segmentation copy's reads its mask member too, a patch copy's knows each sample's image and corner."""

from __future__ import annotations

import copy
import io
import zlib
from dataclasses import dataclass

import numpy as np
from omegaconf import OmegaConf
from PIL import Image

from app.data.copies.copy_storage import CopyStorage
from app.data.copies.shards import MASK_MEMBER, MEMBER, Manifest, index_name, masks_name, prepare_again, sample_key
from app.data.masked import MaskRule
from app.data.pixels import tiff
from app.data.pixels.bands import fit_bands
from app.data.pixels.headers import stored_decode_bytes
from app.data.pixels.images import Decode, DecodeError, rgb_from_bytes
from app.data.source import FileSplit, bad_sample_reason
from app.data.split import Drawn, Place, WholeImages
from app.errors import BadSampleError, DataError
from app.schema.data import PatchesConfig

SPAN_GAP = 4096  # at most this much tar framing between an image's data and its mask's: read in the same request


@dataclass(frozen=True, kw_only=True)
class Beside:  # what a copy keeps beside a split's index, read and checked once (None: not that kind of copy)
    vectors: np.ndarray | None = None  # a multilabel copy's labels-<split>.npy
    places: np.ndarray | None = None  # a patch copy's patches-<split>.npy
    masks: np.ndarray | None = None  # a segmentation copy's masks-<split>.npy


class PreparedSplit(WholeImages):
    """One split of a prepared copy: rows `rows` of its index, labelled by it or (multilabel) by `beside.vectors`."""

    def __init__(self, root: CopyStorage, split: str, shards: list[str], *, stored: Manifest,
                 beside: Beside = Beside()):
        self.root, self.split, self.shards, self.format = root, split, list(shards), stored.format
        self.dtype, self.bands = stored.dtype, stored.bands  # the stored images' (raw: the .npy's)
        self._nodata = stored.nodata.get(split, [])  # by index row: what each original's no-data value was
        index = root.index(split)
        self.rows = np.arange(len(index), dtype=np.int64)
        self.labels = np.asarray(index["label"], np.int64) if beside.vectors is None else beside.vectors
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

    def fetch(self, i: int, decode: Decode | None = None, drawn: Drawn | None = None):
        """Sample i's stored bytes: one read of its member's range of its shard."""
        self.rows[i]  # an IndexError stays an IndexError
        try:
            return self._fetched(i)
        except DataError:
            raise  # storage that cannot be reached (never skipped as a bad sample), or a bad sample already named
        except Exception as exc:
            raise BadSampleError(i, self.describe(i), bad_sample_reason(exc)) from exc

    def _fetched(self, i: int) -> bytearray:
        row = self._row(i)
        data = self._read(int(row["shard"]), int(row["offset"]), int(row["length"]))
        self._check_crc(row, data)
        return data

    def _read(self, shard: int, offset: int, length: int) -> bytearray:
        data = self.root.read(self.shards[shard], offset, length)
        if len(data) != length:
            raise DecodeError(f"the shard ends {length - len(data)} bytes before the member does (a truncated shard)")
        return data

    def _check_crc(self, row, data: bytearray, held_in: str = "") -> None:
        """The member's bytes against its row's CRC32 (a format 1 index has none: unchecked)."""
        if "crc" not in row.dtype.names:
            return
        stored, read = int(row["crc"]), zlib.crc32(data)
        if read != stored:
            raise DecodeError(f"its bytes fail their CRC32 check ({read:08x} where {held_in or index_name(self.split)} "
                              f"holds {stored:08x}): the shard is damaged; delete it, then {self._mending()}")

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
        return self._member(i, MEMBER[self.format])

    def _member(self, i: int, extension: str) -> str:
        key = sample_key(self.split, int(self.rows[i]))
        return f"{self.shard_path(int(self._row(i)['shard']))} member {key}.{extension}"

    def nodata(self, i: int) -> float | None:  # as its original had it: kept by prepare, judged as a file's is
        return tiff.held_nodata(self._nodata[self.rows[i]] if self._nodata else None, self.dtype,
                                f"{self.root} row {i}")

    def largest_decode_bytes(self, decode: Decode) -> tuple[int, int]:  # from the index's sizes alone
        if self._index is None:
            self._index = self.root.index(self.split)
        rows = self._index[self.rows]
        heights, widths = np.asarray(rows["height"], np.int64), np.asarray(rows["width"], np.int64)
        return stored_decode_bytes(heights, widths, decode, jpeg=self.format == "jpeg"), 0


class PreparedMasks(PreparedSplit):
    """A segmentation copy's split: sample i is its image and its mask member (masks-<split>.npy), read in one range."""

    def __init__(self, root: CopyStorage, split: str, shards: list[str], *, stored: Manifest, beside: Beside):
        super().__init__(root, split, shards, stored=stored, beside=beside)
        self.mask_dtype = MaskRule(len(stored.class_names), stored.ignore_index).dtype
        self._masks: np.ndarray | None = beside.masks

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "_masks": None}  # mapped again by each process, as the index

    def _fetched(self, i: int) -> tuple[bytearray, bytearray]:  # one read: prepare writes the mask right after
        if self._masks is None:
            self._masks = self.root.masks(self.split)
        row, mask = self._row(i), self._masks[self.rows[i]]
        start, gap = int(row["offset"]), int(mask["offset"]) - int(row["offset"]) - int(row["length"])
        if 0 <= gap <= SPAN_GAP:
            data = self._read(int(row["shard"]), start, int(mask["offset"]) + int(mask["length"]) - start)
            image, held = data[:int(row["length"])], data[int(mask["offset"]) - start:]
        else:
            image, held = (self._read(int(row["shard"]), int(r["offset"]), int(r["length"])) for r in (row, mask))
        self._check_crc(row, image)
        try:
            self._check_crc(mask, held, masks_name(self.split))
        except DecodeError as exc:
            raise BadSampleError(i, self._member(i, MASK_MEMBER), str(exc)) from exc
        return image, held

    def decode(self, i: int, raw, decode: Decode | None = None) -> tuple[np.ndarray, np.ndarray]:  # type: ignore
        image = super().decode(i, raw[0], decode)
        try:
            mask = mask_from_png(bytes(raw[1]), self.mask_dtype)
            if mask.shape != image.shape[:2]:
                raise DecodeError(f"it is {mask.shape[1]}×{mask.shape[0]} (width×height) where its image is "
                                  f"{image.shape[1]}×{image.shape[0]}")
        except Exception as exc:
            raise BadSampleError(i, self._member(i, MASK_MEMBER), bad_sample_reason(exc)) from exc
        return image, mask


def mask_from_png(data: bytes, dtype: str) -> np.ndarray:
    """A mask member's class indices, writable, of `dtype`; a DecodeError where it holds another kind of PNG."""
    with Image.open(io.BytesIO(data)) as img:
        mask = np.array(img)
    if mask.dtype != np.dtype(dtype) or mask.ndim != 2:
        raise DecodeError(f"a mask member holds {mask.dtype} {mask.ndim}-D pixels, not {dtype} class indices")
    return mask


class PreparedPatches(PreparedSplit):
    """A patch copy's split: each sample's image and corner (patches-<split>.npy), its images' paths and labels."""

    def __init__(self, root: CopyStorage, split: str, shards: list[str], *, stored: Manifest, beside: Beside):
        super().__init__(root, split, shards, stored=stored, beside=beside)
        kept = stored.patches
        self.places, self.patches = beside.places, patches_config(kept["settings"])
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


class PreparedPatchMasks(PreparedMasks, PreparedPatches):
    """A segmentation patch copy's split: each sample an (image, mask) pair, and its patch's image and corner."""


def patches_config(settings: dict) -> PatchesConfig:
    """data.patches as a patch copy's manifest keeps it (a key added since: its default)."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PatchesConfig), settings))
