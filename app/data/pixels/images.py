"""One image file → its pixels: RGB uint8 (H, W, 3) for 8-bit files (large JPEGs decoded at a reduced scale), a 16-bit
PNG's own uint16 samples; a TIFF is handed to app/data/pixels/tiff.py unread (`TiffAt`)."""

from __future__ import annotations

import io
import os
import re
import stat
import warnings

import cv2
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from app.data.pixels.bands import fit_bands
from app.data.pixels.decode import DEFAULT_MAX_PIXELS, Decode, DecodeError, Pixels, TiffAt, check_pixels, pixel_count
from app.data.pixels.scanner_files import OTHER_SCANNERS, TIFF_SCANNERS

__all__ = ["DEFAULT_MAX_PIXELS", "Decode", "DecodeError", "Pixels", "TiffAt", "check_pixels", "decoded", "load_rgb"]

# the scanners' whole-slide files, read region by region (data.patches): OpenSlide's, or tifffile's for TIFFs
EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", *TIFF_SCANNERS, *OTHER_SCANNERS)

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


# What is read of a file before its declared size is checked: JPEG, PNG, WebP, BMP and most TIFF
# headers fit (a JPEG's EXIF block may not: the decode then checks).
HEAD_BYTES = 64 * 1024
# Pillow warns between its limit and twice it, and refuses above; load_rgb checks first, with
# the configured limit, on both decode paths.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


TIFF_MAGIC = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")  # classic TIFF and BigTIFF, either byte order
PNG_START = b"\x89PNG\r\n\x1a\n"


def pillow_refusal(error: Exception) -> DecodeError:
    """Pillow's DecompressionBombError as ours; it names Pillow's limit, which no data.max_image_pixels lifts."""
    declared = re.search(r"\((\d+) pixels\)", str(error))
    count = pixel_count(int(declared.group(1))) if declared else "too many"
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
    """`path` as writable uint8 RGB (H, W, 3); a DecodeError if unreadable or over `max_pixels`; OSErrors pass."""
    return decoded(read_bytes(path, max_pixels), Decode(min_short_side, max_pixels))


def decoded(raw: bytes | TiffAt, decode: Decode) -> np.ndarray:
    """A fetched file (its bytes, or a TIFF by tifffile) as the run's pixels (`decode.pixels`)."""
    if isinstance(raw, TiffAt):
        # tifffile (and its zarr) loads where a TIFF is met: a folder of JPEGs' workers never import it
        from app.data.pixels import tiff

        image = tiff.read_tiff(raw.path, min_short_side=decode.min_short_side, max_pixels=decode.max_pixels)
    else:
        image = rgb_from_bytes(raw, decode.min_short_side, decode.max_pixels)
    pixels = decode.pixels
    return fit_bands(image, channels=pixels.channels, bands=pixels.bands, dtype=pixels.dtype)


def read_bytes(path: str | os.PathLike, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> bytes | TiffAt:
    """The file's bytes (a TIFF: `TiffAt`); a DecodeError for an empty file, one declaring more than `max_pixels` (never
    read whole), or a device, pipe or socket (unopened: /dev/urandom never ends, a pipe waits for a writer)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise DecodeError("not a regular file (a device, pipe or socket)")
    with open(path, "rb") as file:
        head = file.read(HEAD_BYTES)
        if not head:
            raise DecodeError("empty file")
        if head[:4] in TIFF_MAGIC:
            return TiffAt(os.fspath(path))
        size = declared_size(head, max_pixels)
        if size is not None:
            check_pixels(*size, max_pixels)
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
    if raw[:8] == PNG_START and len(raw) > 24 and raw[24] == 16:  # IHDR's bit depth: Pillow would cut RGB to 8 bits
        return _sixteen_bit_png(raw, max_pixels)
    if raw[:3] == JPEG_START:
        frame = jpeg_frame(raw)
        if frame is not None:
            check_pixels(frame[0], frame[1], max_pixels)
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
            check_pixels(img.width, img.height, max_pixels)
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


def _sixteen_bit_png(raw: bytes, max_pixels: int | None) -> np.ndarray:
    """A 16-bit PNG's samples as they are, uint16 (H, W) or (H, W, 3 or 4) in RGB order, by OpenCV."""
    check_pixels(int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big"), max_pixels)
    image = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_UNCHANGED)
    if image is None:
        raise DecodeError("cannot decode PNG: truncated or damaged")
    if image.ndim == 3 and image.shape[2] in (3, 4):  # OpenCV's BGR(A); grey and alpha stay as they are
        image = image[:, :, [2, 1, 0, 3][:image.shape[2]]]
    return np.ascontiguousarray(image)


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
    if img.mode in SIXTEEN_BIT_MODES:  # the grey's own 16 bits: the run's data.dtype takes them or refuses them
        values = np.asarray(img)
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise DecodeError(f"its samples are 32-bit integers ({img.mode}): data.dtype reads uint8 or uint16 images")
        return values.astype(np.uint16)
    if img.mode == "F":
        raise DecodeError("its samples are 32-bit floats (an elevation model or a float raster?): data.dtype reads "
                          "uint8 or uint16 images for now; convert it, or leave it out")
    if img.mode == "P" and "transparency" in img.info:
        # Via RGBA: Pillow warns when a palette with transparency goes straight to RGB.
        img = img.convert("RGBA")
    if img.mode not in _DIRECT_MODES:
        raise DecodeError(f"unsupported image mode {img.mode}")
    if img.mode != "RGB":
        img = img.convert("RGB")
    return np.array(img, dtype=np.uint8)  # a copy: Pillow's array view is read-only
