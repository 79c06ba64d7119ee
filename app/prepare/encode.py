"""A worker's share of prepare: one source sample, decoded as the loader decodes → its stored member (the run's pixels,
upright, down to the stored short side, as JPEG or .npy; its mask nearest-resized, as PNG), its label, the original's
path and size (a patch's place)."""

from __future__ import annotations

import io
import json
import os
import zlib
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image

from app.data.pixels.images import Decode, Pixels, TiffAt, jpeg_frame
from app.data.slides.patches import PatchSplit
from app.errors import BadSampleError

_STATE: dict = {}  # a worker's splits and Encoding, set once by `start_worker`


@dataclass(frozen=True, kw_only=True)
class Encoding:
    short_side: int | None  # None: full size
    format: str  # jpeg | raw
    quality: int
    max_pixels: int | None
    pixels: Pixels = Pixels()  # the run's bands and type: a raw copy stores them as they are


@dataclass(frozen=True, kw_only=True)
class Encoded:
    index: int  # the sample's index in its source split
    image: bytes  # the image member's bytes
    data_start: int  # where the pixels start in `image`: 0 for a JPEG, the .npy header's length for raw
    crc: int  # zlib.crc32 of image[data_start:], the bytes a reader reads (computed here, in the worker)
    height: int
    width: int
    label: int | list[int]  # several labels an image: their class indices
    meta: bytes  # the .json member
    source_bytes: int
    nodata: float | None = None  # a raw copy's: the original's no-data value (a GeoTIFF's GDAL_NODATA), kept
    mask: bytes | None = None  # a segmentation sample's mask member (a PNG of class indices); None: no mask
    mask_crc: int = 0  # zlib.crc32 of `mask`


@dataclass(frozen=True)
class Bad:
    index: int
    where: str
    detail: str


def start_worker(splits: dict, encoding: Encoding) -> None:
    """A worker process's initializer: the splits it reads and how it encodes."""
    _STATE.update(splits=splits, encoding=encoding)


def encode_chunk(split_name: str, indices: list[int]) -> list[Encoded | Bad]:
    split, encoding = _STATE["splits"][split_name], _STATE["encoding"]
    return [encode_or_bad(split, index, encoding) for index in indices]


def encode_or_bad(split, index: int, encoding: Encoding) -> Encoded | Bad:
    try:
        return encode_sample(split, index, encoding)
    except BadSampleError as bad:
        return Bad(index, bad.where, bad.reason)


def encode_sample(split, index: int, encoding: Encoding) -> Encoded:
    """Sample `index` of `split` as stored, JPEGs draft-decoded where the short side stays at least the stored one."""
    paired = split.mask_dtype is not None  # the split's kind: (image, mask) pairs, decoded whole (a mask has no draft)
    decode = Decode(None if paired else encoding.short_side, encoding.max_pixels, encoding.pixels)
    raw = split.fetch(index, decode)
    image, mask = split.decode(index, raw, decode) if paired else (split.decode(index, raw, decode), None)
    original = _original_size(raw, image)
    nodata = split.nodata(index) if encoding.format == "raw" else None  # JPEG's lossy bytes could keep none
    image = fit_short_side(image, encoding.short_side, nearest=nodata is not None)
    if mask is not None:  # at the image's stored size, no class blended into another
        mask = mask_png(fit_short_side(mask.astype(split.mask_dtype, copy=False), encoding.short_side, nearest=True))
    member, data_start = _encoded(image, encoding)
    height, width = image.shape[:2]
    label = stored_label(split.labels[index])
    described = {"path": split.describe(index), "size": list(original)}
    if isinstance(split, PatchSplit):  # a patch of an image read region by region: which image, where, which level
        image, top, left = split.where(index)
        described = {"path": split.images.paths[image], "level": split.layouts[image].level, "x": left, "y": top}
    meta = json.dumps({**described, "stored_size": [height, width], "label": label}).encode()
    return Encoded(index=index, image=member, data_start=data_start, crc=zlib.crc32(memoryview(member)[data_start:]),
                   height=height, width=width, label=label, meta=meta, source_bytes=_source_bytes(raw), nodata=nodata,
                   mask=mask, mask_crc=0 if mask is None else zlib.crc32(mask))


def _source_bytes(raw) -> int:  # a file's bytes, a TIFF's size, or a region's pixels (a patch's mask: none)
    if isinstance(raw, tuple):  # a patch of a slide with its mask, as PatchSplit.fetch gives them
        raw = raw[0]
    return len(raw) if isinstance(raw, bytes) else os.path.getsize(raw.path) if isinstance(raw, TiffAt) \
        else int(raw.nbytes)


def mask_png(mask: np.ndarray) -> bytes:
    """A mask member: its class indices as a lossless PNG, 8-bit grey (L) or 16-bit (I;16) by its dtype."""
    buffer = io.BytesIO()
    Image.fromarray(mask).save(buffer, "PNG")
    return buffer.getvalue()


def stored_label(label: np.ndarray) -> int | list[int]:
    """A sample's label as a copy stores it: its class index, or (a 0/1 row) the indices of its classes."""
    return [int(c) for c in np.flatnonzero(label)] if np.ndim(label) == 1 else int(label)


def fit_short_side(image: np.ndarray, short_side: int | None, *, nearest: bool = False) -> np.ndarray:
    """`image`'s short side down to `short_side`, never up; `nearest`: no no-data value blended into valid ones."""
    height, width = image.shape[:2]
    if short_side is None or min(height, width) <= short_side:
        return np.ascontiguousarray(image)
    scale = short_side / min(height, width)
    size = (max(short_side, round(width * scale)), max(short_side, round(height * scale)))  # cv2: (w, h)
    if height <= width:
        size = (size[0], short_side)
    else:
        size = (short_side, size[1])
    return cv2.resize(image, size, interpolation=cv2.INTER_NEAREST if nearest else cv2.INTER_AREA)


def _encoded(image: np.ndarray, encoding: Encoding) -> tuple[bytes, int]:
    buffer = io.BytesIO()
    if encoding.format == "jpeg":
        Image.fromarray(image, "RGB").save(buffer, "JPEG", quality=encoding.quality, subsampling=0)
        return buffer.getvalue(), 0
    np.lib.format.write_array(buffer, image, allow_pickle=False)
    data = buffer.getvalue()
    return data, len(data) - image.nbytes


def _original_size(raw, image: np.ndarray) -> tuple[int, int]:
    """The original's (height, width), upright: a draft decode made `image` smaller than the file."""
    height, width = image.shape[:2]
    frame = jpeg_frame(raw) if isinstance(raw, bytes) else None
    if frame is None:
        return height, width
    frame_w, frame_h = frame[0], frame[1]
    return (frame_h, frame_w) if (frame_h >= frame_w) == (height >= width) else (frame_w, frame_h)
