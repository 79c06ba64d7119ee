"""One image file → RGB uint8 array (H, W, 3), decoding large JPEGs at a reduced scale."""

from __future__ import annotations

import io
import os
import re
import stat
import warnings
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff")

# OpenCV's flags for libjpeg's DCT-domain reduction by 1, 2, 4, 8: IMREAD_REDUCED_GRAYSCALE_k is
# the reduction bit alone (IMREAD_GRAYSCALE is 0), to combine with IMREAD_COLOR_RGB.
_CV2_REDUCED = {1: 0, 2: cv2.IMREAD_REDUCED_GRAYSCALE_2, 4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
                8: cv2.IMREAD_REDUCED_GRAYSCALE_8}

JPEG_START = b"\xff\xd8\xff"  # SOI and the next marker's FF: how Pillow recognises a JPEG too
# SOF0..SOF15 but DHT (C4), JPG (C8) and DAC (CC), which share the range.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}

# Modes Pillow converts to RGB by itself (alpha is dropped, palettes looked up).
_DIRECT_MODES = {"RGB", "RGBA", "RGBX", "L", "LA", "1", "P", "PA", "CMYK", "YCbCr"}
SIXTEEN_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N", "I"}


# Pillow's own limit: images declaring more pixels are refused before they are decoded.
DEFAULT_MAX_PIXELS = 89_478_485
# What is read of a file before its declared size is checked: JPEG, PNG, WebP, BMP and most TIFF
# headers fit (a JPEG's EXIF block may not: the decode then checks).
HEAD_BYTES = 64 * 1024
# Pillow warns between its limit and twice it, and refuses above; load_rgb checks first, with
# the configured limit, on both decode paths.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


class DecodeError(ValueError):
    """A file that is not a readable image; the message is a short reason (no path)."""


@dataclass(frozen=True)
class Decode:
    """How a pipeline has its files decoded: `min_short_side` allows JPEG draft decoding (None:
    full size); images declaring more than `max_pixels` are refused (None: no limit)."""

    min_short_side: int | None = None
    max_pixels: int | None = DEFAULT_MAX_PIXELS


def _check_pixels(width: int, height: int, max_pixels: int | None) -> None:
    if max_pixels is not None and width * height > max_pixels:
        raise DecodeError(f"it declares {width}×{height} = {_count(width * height)} pixels, above "
                          f"data.max_image_pixels={max_pixels} (a decompression bomb, or a scan too large: raise "
                          "data.max_image_pixels if the file is genuine)")


def _count(pixels: int) -> str:
    """Millions from 100 M up; the exact count below, where a user's limit may be near (a 32×32 image is not "0 M")."""
    return f"{pixels / 1e6:.0f} M" if pixels >= 100_000_000 else f"{pixels:,}"


def pillow_refusal(error: Exception) -> DecodeError:
    """Pillow's DecompressionBombError as ours; it names Pillow's limit, which no data.max_image_pixels lifts."""
    declared = re.search(r"\((\d+) pixels\)", str(error))
    count = _count(int(declared.group(1))) if declared else "too many"
    return DecodeError(f"it declares {count} pixels, above Pillow's own limit ({2 * Image.MAX_IMAGE_PIXELS}), "
                       "which no data.max_image_pixels lifts (a decompression bomb, or an image too large to decode "
                       "whole: resize or tile it)")


def draft_scale(width: int, height: int, min_short_side: int) -> int:
    """The largest reduction 1, 2, 4 or 8 whose decoded short side (libjpeg rounds up) is still >= min_short_side."""
    short = min(width, height)
    for scale in (8, 4, 2):
        if scale <= short and -(-short // scale) >= min_short_side:
            return scale
    return 1


def load_rgb(path: str | os.PathLike, min_short_side: int | None = None,
             max_pixels: int | None = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decode `path` into a writable, C-contiguous uint8 RGB array (H, W, 3). A DecodeError (short reason) for anything
    not a readable image or declaring more than `max_pixels`; OSErrors such as FileNotFoundError pass unchanged."""
    return rgb_from_bytes(read_bytes(path, max_pixels), min_short_side, max_pixels)


def read_bytes(path: str | os.PathLike, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> bytes:
    """The file's bytes; a DecodeError for an empty file, one whose header declares more than `max_pixels` (never read
    whole), or a device, pipe or socket (refused unopened: /dev/urandom never ends, a pipe waits for a writer)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise DecodeError("not a regular file (a device, pipe or socket)")
    with open(path, "rb") as file:
        head = file.read(HEAD_BYTES)
        if not head:
            raise DecodeError("empty file")
        size = declared_size(head, max_pixels)
        if size is not None:
            _check_pixels(*size, max_pixels)
        return head + file.read()


def declared_size(head: bytes, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> tuple[int, int] | None:
    """(width, height) a file's first bytes declare, or None; a DecodeError where Pillow refuses the size outright."""
    if head[:3] == JPEG_START:  # not Pillow's Python parser: a noticeable share of a sample's time
        frame = jpeg_frame(head)
        return None if frame is None else (frame[0], frame[1])
    try:
        with Image.open(io.BytesIO(head)) as img:
            return img.width, img.height
    except Image.DecompressionBombError as exc:
        raise pillow_refusal(exc) from None
    except Exception:  # noqa: BLE001 - whatever Pillow cannot read from the header is the decode's to name
        return None


def rgb_from_bytes(raw: bytes, min_short_side: int | None = None,
                   max_pixels: int | None = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """`load_rgb` on a file's bytes."""
    if raw[:3] == JPEG_START:
        frame = jpeg_frame(raw)
        if frame is not None:
            _check_pixels(frame[0], frame[1], max_pixels)
        if frame is not None and frame[2] in (1, 3):  # greyscale or RGB; CMYK is Pillow's to convert
            width, height, _ = frame
            fast = _decode_jpeg(raw, draft_scale(width, height, min_short_side) if min_short_side else 1)
            if fast is not None:
                return fast
    # Every other image, and any JPEG OpenCV turns down: Pillow, which names what is wrong.
    return _pillow_rgb(io.BytesIO(raw), min_short_side, max_pixels)


def _pillow_rgb(source, min_short_side: int | None, max_pixels: int | None) -> np.ndarray:
    fmt = "image"  # until Pillow has read the header
    try:
        with Image.open(source) as img:
            fmt = img.format or fmt
            _check_pixels(img.width, img.height, max_pixels)
            if min_short_side is not None and fmt == "JPEG":
                scale = draft_scale(img.width, img.height, min_short_side)
                if scale > 1:
                    # Pillow picks the largest scale s with min(w // rw, h // rh) >= s;
                    # (w // s, h // s) lands in [s, 2s) on both sides, so it picks `scale`.
                    img.draft("RGB", (img.width // scale, img.height // scale))
            img.load()  # decode everything now so a truncated file fails here
            ImageOps.exif_transpose(img, in_place=True)
            return _to_rgb(img)
    except UnidentifiedImageError:
        raise DecodeError("cannot identify image file") from None
    except DecodeError:
        raise
    except Image.DecompressionBombError as exc:
        raise pillow_refusal(exc) from None
    except (OSError, ValueError, SyntaxError) as exc:
        # Pillow reports truncation as OSError("image file is truncated ...") or
        # OSError("Truncated File Read"); other decoder failures vary by plugin.
        if "truncated" in str(exc).lower():
            raise DecodeError(f"truncated {fmt}") from exc
        raise DecodeError(f"cannot decode {fmt}: {exc}") from exc


def jpeg_frame(raw: bytes) -> tuple[int, int, int] | None:
    """(width, height, components) of a JPEG's first SOFn frame; None where the markers before it do not parse."""
    i, end = 2, len(raw)
    while i + 4 <= end:
        if raw[i] != 0xFF:
            return None
        marker = raw[i + 1]
        if marker == 0xFF:  # fill byte before a marker
            i += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
        elif marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header came first
            return None
        elif marker in _SOF_MARKERS:
            if i + 10 > end:
                return None
            # FF Cn, length (2), precision (1), height (2), width (2), components (1)
            return int.from_bytes(raw[i + 7:i + 9], "big"), int.from_bytes(raw[i + 5:i + 7], "big"), raw[i + 9]
        else:
            i += 2 + int.from_bytes(raw[i + 2:i + 4], "big")
    return None


def _decode_jpeg(raw: bytes, scale: int) -> np.ndarray | None:
    """A greyscale or RGB JPEG to RGB, EXIF orientation applied, Pillow's pixels (tested); None where OpenCV fails."""
    try:
        return cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR_RGB | _CV2_REDUCED[scale])
    except cv2.error:
        return None


def _to_rgb(img: Image.Image) -> np.ndarray:
    if img.mode in SIXTEEN_BIT_MODES:
        # Scale, not clip: 16-bit 40000 is a mid grey (155), not white.
        values = np.clip(np.asarray(img).astype(np.int64), 0, 65535)
        grey = (values * 255 // 65535).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if img.mode == "F":
        values = np.nan_to_num(np.asarray(img))
        if values.max(initial=0) <= 1:  # the 0–1 convention of float images, not a black 0–255 one
            values = values * 255
        grey = np.clip(values, 0, 255).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if img.mode == "P" and "transparency" in img.info:
        # Via RGBA: Pillow warns when a palette with transparency goes straight to RGB.
        img = img.convert("RGBA")
    if img.mode not in _DIRECT_MODES:
        raise DecodeError(f"unsupported image mode {img.mode}")
    if img.mode != "RGB":
        img = img.convert("RGB")
    return np.array(img, dtype=np.uint8)  # a copy: Pillow's array view is read-only
