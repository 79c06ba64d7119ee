"""One image file → RGB uint8 array (H, W, 3), decoding large JPEGs at a reduced scale.

No TensorFlow here: loader workers import this module.
"""

from __future__ import annotations

import os

import cv2
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff")

# OpenCV's flags for libjpeg's DCT-domain reduction by 1, 2, 4, 8: IMREAD_REDUCED_GRAYSCALE_k is
# the reduction bit alone (IMREAD_GRAYSCALE is 0), to combine with IMREAD_COLOR_RGB.
_CV2_REDUCED = {1: 0, 2: cv2.IMREAD_REDUCED_GRAYSCALE_2, 4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
                8: cv2.IMREAD_REDUCED_GRAYSCALE_8}

# Modes Pillow converts to RGB by itself (alpha is dropped, palettes looked up).
_DIRECT_MODES = {"RGB", "RGBA", "RGBX", "L", "LA", "1", "P", "PA", "CMYK", "YCbCr"}
_SIXTEEN_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N", "I"}


class DecodeError(ValueError):
    """A file that is not a readable image; the message is a short reason (no path)."""


def draft_scale(width: int, height: int, min_short_side: int) -> int:
    """The largest reduction 1, 2, 4 or 8 whose decoded short side is still >= min_short_side.

    libjpeg rounds reduced sizes up, hence the ceiling division; keeping the short side at
    or above the target means the caller's resize never upsamples.
    """
    short = min(width, height)
    for scale in (8, 4, 2):
        if scale <= short and -(-short // scale) >= min_short_side:
            return scale
    return 1


def load_rgb(path: str | os.PathLike, min_short_side: int | None = None) -> np.ndarray:
    """Decode `path` fully into a writable, C-contiguous uint8 array (H, W, 3), RGB order.

    Raises DecodeError (short reason) for anything that is not a readable image, and
    OSError subclasses such as FileNotFoundError unchanged.
    """
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            raise DecodeError("empty file")
        fmt = "image"  # until Pillow has read the header
        try:
            with Image.open(file) as img:
                fmt = img.format or fmt
                scale = 1
                if min_short_side is not None and fmt == "JPEG":
                    scale = draft_scale(img.width, img.height, min_short_side)
                if fmt == "JPEG" and img.mode in ("RGB", "L"):
                    file.seek(0)
                    fast = _decode_jpeg(file.read(), scale)
                    if fast is not None:
                        return fast
                # Every other image, and any JPEG OpenCV turns down: Pillow, which names what is wrong.
                if scale > 1:
                    # Pillow picks the largest scale s with min(w // rw, h // rh) >= s;
                    # (w // s, h // s) lands in [s, 2s) on both sides, so it picks `scale`.
                    img.draft("RGB", (img.width // scale, img.height // scale))
                img.load()  # decode everything now so a truncated file fails here
                ImageOps.exif_transpose(img, in_place=True)
                return _to_rgb(img)
        except UnidentifiedImageError:
            raise DecodeError("cannot identify image file") from None
        except (OSError, ValueError, SyntaxError) as exc:
            # Pillow reports truncation as OSError("image file is truncated ...") or
            # OSError("Truncated File Read"); other decoder failures vary by plugin.
            if "truncated" in str(exc).lower():
                raise DecodeError(f"truncated {fmt}") from exc
            raise DecodeError(f"cannot decode {fmt}: {exc}") from exc


def _decode_jpeg(raw: bytes, scale: int) -> np.ndarray | None:
    """An RGB or greyscale JPEG straight into an RGB array, EXIF orientation applied; None when
    OpenCV cannot decode it (a truncated file, say). Same libjpeg-turbo, same settings, so the
    same pixels as Pillow's decode, draft and exif_transpose (tested), in about 70 % of the
    time: no 4-byte intermediate image to pack and copy out."""
    try:
        return cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR_RGB | _CV2_REDUCED[scale])
    except cv2.error:
        return None


def _to_rgb(img: Image.Image) -> np.ndarray:
    if img.mode in _SIXTEEN_BIT_MODES:
        # Scale, not clip: 16-bit 40000 is a mid grey (155), not white.
        values = np.clip(np.asarray(img).astype(np.int64), 0, 65535)
        grey = (values * 255 // 65535).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if img.mode == "F":
        grey = np.clip(np.nan_to_num(np.asarray(img)), 0, 255).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if img.mode == "P" and "transparency" in img.info:
        # Via RGBA: Pillow warns when a palette with transparency goes straight to RGB.
        img = img.convert("RGBA")
    if img.mode not in _DIRECT_MODES:
        raise DecodeError(f"unsupported image mode {img.mode}")
    if img.mode != "RGB":
        img = img.convert("RGB")
    return np.array(img, dtype=np.uint8)  # a copy: Pillow's array view is read-only
