"""What a split's files hold once decoded, read off their headers: the memory plan's and bench's view of a dataset."""

from __future__ import annotations

import os
import stat

import numpy as np
from PIL import Image

from app.data.pixels import tiff
from app.data.pixels.images import (
    DEFAULT_MAX_PIXELS,
    HEAD_BYTES,
    JPEG_START,
    SIXTEEN_BIT_MODES,
    TIFF_MAGIC,
    Decode,
    DecodeError,
    declared_size,
    draft_scale,
    jpeg_frame,
    pillow_refusal,
)

# Bytes a pixel in Pillow's own storage of a mode, where not 4 (RGB, RGBA, CMYK, I, F: 4).
_PILLOW_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}


def files_decode_bytes(paths: list[str], decode: Decode, most: int = 256) -> tuple[int, int]:
    """The most one decode holds among up to `most` of `paths`, by headers: (largest RGB array, Pillow copies)."""
    sizes = [decode_bytes(path, decode) for path in paths[::max(1, len(paths) // most)]]
    return max((a for a, _ in sizes), default=0), max((p for _, p in sizes), default=0)


def stored_decode_bytes(heights: np.ndarray, widths: np.ndarray, decode: Decode, *, jpeg: bool) -> int:
    """A prepared copy's largest RGB array from its index's sizes: JPEGs draft-reduced, any above max_pixels out."""
    kept = np.ones(len(heights), bool) if decode.max_pixels is None else heights * widths <= decode.max_pixels
    heights, widths = heights[kept], widths[kept]
    scale = np.ones(len(heights), np.int64)
    if jpeg and decode.min_short_side:
        short = np.minimum(heights, widths)
        for s in (2, 4, 8):  # draft_scale's rule, all rows at once: the largest that keeps the short side
            scale = np.where((s <= short) & (-(-short // s) >= decode.min_short_side), s, scale)
    pixels = -(-heights // scale) * -(-widths // scale)
    return int(pixels.max(initial=0)) * 3


def decode_bytes(path: str | os.PathLike, decode: Decode) -> tuple[int, int]:
    """(the decoded array's bytes, Pillow's copies' bytes) of `path`, from its header; (0, 0) for a refused file."""
    if _is_tiff(path):  # tifffile's read: the level's array, no copy of Pillow's
        return tiff.decoded_bytes(path, decode.min_short_side, decode.max_pixels), 0
    found = header_draft(path, decode.min_short_side, decode.max_pixels)
    if found is None:
        return 0, 0
    width, height, scale = found
    pixels = -(-width // scale) * -(-height // scale)
    mode = _pillow_mode(path)
    if mode is None:
        return pixels * 3, 0
    if mode in SIXTEEN_BIT_MODES or mode == "F":  # scaled through int64 or float working copies
        return pixels * 3, pixels * (_PILLOW_BYTES.get(mode, 4) + 2 * 8)
    return pixels * 3, pixels * (_PILLOW_BYTES.get(mode, 4) + (0 if mode == "RGB" else 4))


def _is_tiff(path: str | os.PathLike) -> bool:
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a pipe is never opened: it would wait for a writer
            return False
        with open(path, "rb") as file:
            return file.read(4) in TIFF_MAGIC
    except OSError:
        return False


def _pillow_mode(path: str | os.PathLike) -> str | None:
    """The mode Pillow decodes `path` in; None for a JPEG OpenCV decodes (greyscale or RGB)."""
    with open(path, "rb") as file:
        head = file.read(HEAD_BYTES)
    frame = jpeg_frame(head) if head[:3] == JPEG_START else None
    if frame is not None:
        return None if frame[2] in (1, 3) else "CMYK"
    try:
        with Image.open(path) as img:
            return img.mode
    except Exception:  # noqa: BLE001 - sized already; counted as Pillow's widest mode
        return "RGBA"


def header_draft(path: str | os.PathLike, min_short_side: int | None,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS) -> tuple[int, int, int] | None:
    """(width, height, the draft's reduction 1-8) from the header; None: unopenable, no size, over `max_pixels`."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as file:
            head = file.read(HEAD_BYTES)
        size = declared_size(head, max_pixels) or _pillow_size(path, max_pixels)
    except (OSError, DecodeError):
        return None
    if size is None or (max_pixels is not None and size[0] * size[1] > max_pixels):
        return None
    w, h = size
    return w, h, draft_scale(w, h, min_short_side) if head[:3] == JPEG_START and min_short_side else 1


def _pillow_size(path: str | os.PathLike, max_pixels: int | None) -> tuple[int, int] | None:
    """(width, height) as Pillow reads them, seeking past HEAD_BYTES where it must; None where it cannot."""
    try:
        with Image.open(path) as img:
            return img.width, img.height
    except Image.DecompressionBombError as exc:
        raise pillow_refusal(exc) from None
    except Exception:  # noqa: BLE001 - not an image: the loader's to report
        return None
