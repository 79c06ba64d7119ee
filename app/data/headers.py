"""What the files of a split will hold once decoded, read off their headers alone: the memory
plan's and bench's view of a dataset. The decode itself is app/data/images.py.

No TensorFlow here.
"""

from __future__ import annotations

import os
import stat

import numpy as np
from PIL import Image

from app.data.images import (
    DEFAULT_MAX_PIXELS,
    HEAD_BYTES,
    JPEG_START,
    SIXTEEN_BIT_MODES,
    Decode,
    DecodeError,
    declared_size,
    draft_scale,
    jpeg_frame,
    pillow_refusal,
)

# Bytes a pixel in Pillow's own storage of a mode, where not 4 (RGB, RGBA, CMYK, I, F: 4).
_PILLOW_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}


def largest_decode_bytes(split, decode: Decode, most: int = 256) -> tuple[int, int]:
    """The most memory one decode holds among up to `most` files of `split`, spread over it,
    from headers only: (the largest RGB array, the most Pillow's own copies hold: `decode_bytes`).
    A file the loader will refuse (unreadable, or above `decode.max_pixels`) is the loader's to
    report, by the bad-sample policy, and counts for nothing here. An array split's rows are
    all one size."""
    if hasattr(split, "stored_sizes"):
        return _stored_decode_bytes(split, decode), 0
    if not hasattr(split, "paths"):
        return int(np.prod(np.load(split.npy_path, mmap_mode="r").shape[1:])), 0
    step = max(1, len(split.paths) // most)
    sizes = [decode_bytes(path, decode) for path in split.paths[::step]]
    return max((a for a, _ in sizes), default=0), max((p for _, p in sizes), default=0)


def _stored_decode_bytes(split, decode: Decode) -> int:
    """A prepared copy's largest RGB array, from the sizes its index stores (every sample's, no
    file opened): JPEGs reduced by the draft rule as the decode reduces them; OpenCV decodes
    them (RGB baseline), so no Pillow copies. Samples above `decode.max_pixels` the loader refuses."""
    heights, widths = split.stored_sizes()
    kept = np.ones(len(heights), bool) if decode.max_pixels is None else heights * widths <= decode.max_pixels
    heights, widths = heights[kept], widths[kept]
    scale = np.ones(len(heights), np.int64)
    if getattr(split, "format", None) == "jpeg" and decode.min_short_side:
        short = np.minimum(heights, widths)
        for s in (2, 4, 8):  # draft_scale's rule, all rows at once: the largest that keeps the short side
            scale = np.where((s <= short) & (-(-short // s) >= decode.min_short_side), s, scale)
    pixels = -(-heights // scale) * -(-widths // scale)
    return int(pixels.max(initial=0)) * 3


def decode_bytes(path: str | os.PathLike, decode: Decode) -> tuple[int, int]:
    """What decoding `path` holds, from its header alone: (its RGB array, H × W × 3 after any
    draft reduction; Pillow's own copies beside it: the image in the file's mode, and its RGB
    conversion where the mode is another). A JPEG that OpenCV decodes has no Pillow copies; a
    greyscale PNG has 5 bytes a pixel of them. (0, 0) for a file the loader will refuse."""
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
    """(width, height, the reduction 1, 2, 4 or 8 this module's decoder makes of the file under
    the draft rule `min_short_side`), from its header alone; None for a file that cannot be
    opened, does not declare a size, or declares more than `max_pixels`."""
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
    """(width, height) as Pillow reads them off the file, seeking as far as it needs (a JPEG whose
    frame header lies past HEAD_BYTES); None where it cannot."""
    try:
        with Image.open(path) as img:
            return img.width, img.height
    except Image.DecompressionBombError as exc:
        raise pillow_refusal(exc) from None
    except Exception:  # noqa: BLE001 - not an image: the loader's to report
        return None
