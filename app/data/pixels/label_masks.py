"""A segmentation mask read as users keep them (a palette or grey PNG, a TIFF label raster): one class index a pixel,
uint8 or uint16 (H, W); a colour, float, multi-band or lossy mask refused by a DecodeError naming what was found."""

from __future__ import annotations

import io
import os
import stat
import struct

import numpy as np
from PIL import Image, UnidentifiedImageError

from app.data.pixels.decode import DecodeError, check_pixels
from app.data.pixels.images import SIXTEEN_BIT_MODES, TIFF_MAGIC, pillow_refusal, read_bytes

# What a refused Pillow mode holds, for the message.
_MODE_HOLDS = {"RGB": "colour", "RGBA": "colour and alpha", "RGBX": "colour", "CMYK": "colour", "YCbCr": "colour",
               "LAB": "colour", "HSV": "colour", "LA": "grey and alpha", "PA": "palette indices and alpha",
               "La": "grey and alpha"}
_AS_INDICES = "save it as class indices: a palette PNG (mode P), a grayscale one (L, or 16-bit) or a one-band TIFF"
# tifffile's failures (its TiffFileError is a ValueError); struct.error: a header cut short
_TIFF_ERRORS = (ValueError, IndexError, KeyError, RuntimeError, struct.error)


def read_mask(path: str | os.PathLike, max_pixels: int | None) -> np.ndarray:
    """`path`'s class indices, writable uint8 or uint16 (H, W); a DecodeError for what cannot be one."""
    raw = read_bytes(path, max_pixels)  # its declared size checked first; a TIFF comes back unread
    if not isinstance(raw, bytes):
        return _tiff_mask(raw.path, max_pixels)
    fmt = "mask"  # until Pillow has read the header
    try:
        with Image.open(io.BytesIO(raw)) as img:
            fmt = img.format or fmt
            _check_format(img)
            check_pixels(img.width, img.height, max_pixels)  # a header past read_bytes' first bytes
            img.load()  # every pixel decoded here, so a truncated file fails here
            return _indices(img)
    except DecodeError:
        raise
    except UnidentifiedImageError:
        raise DecodeError("cannot identify image file") from None
    except Image.DecompressionBombError as error:
        raise pillow_refusal(error) from None
    except (OSError, ValueError, SyntaxError) as error:  # Pillow's truncations and decoders' failures vary by plugin
        raise DecodeError(f"truncated {fmt}" if "truncated" in str(error).lower()
                          else f"cannot decode {fmt}: {error}") from error


def mask_size(path: str | os.PathLike) -> tuple[int, int]:
    """(height, width) of `path`'s mask, from its header alone."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # a pipe is never opened: it would wait for a writer
        raise DecodeError("not a regular file (a device, pipe or socket)")
    with open(path, "rb") as file:
        tiff = file.read(4) in TIFF_MAGIC
    if tiff:
        # tifffile loads where a TIFF is met: a run of PNG masks never imports it
        import tifffile

        try:
            with tifffile.TiffFile(path) as tif:
                series = tif.series[0]
                return series.shape[series.axes.index("Y")], series.shape[series.axes.index("X")]
        except _TIFF_ERRORS as error:
            raise DecodeError(f"cannot decode TIFF mask: {error}") from error
    try:
        with Image.open(path) as img:  # lazy: the header alone
            return img.height, img.width
    except UnidentifiedImageError:
        raise DecodeError("cannot identify image file") from None
    except Image.DecompressionBombError as error:
        raise pillow_refusal(error) from None


def check_mask_values(mask: np.ndarray, classes: int, ignore_index: int | None) -> str | None:
    """None when every value is a class index or `ignore_index`; else why not, at the first wrong pixel."""
    if mask.size == 0 or int(mask.max()) < classes:  # the common case: one pass
        return None
    wrong = mask >= classes
    if ignore_index is not None:
        wrong &= mask != ignore_index
    count = int(np.count_nonzero(wrong))
    if not count:
        return None
    row, column = np.unravel_index(int(np.argmax(wrong)), mask.shape)
    said = f"value {mask[row, column]} at row {row}, column {column}"
    if ignore_index is None:
        said += f" is not one of the {classes} classes (0..{classes - 1}), and no data.ignore_index is set"
    else:
        said += f" is neither one of the {classes} classes (0..{classes - 1}) nor data.ignore_index {ignore_index}"
    return said + (f" ({count:,} such pixels)" if count > 1 else "")


def _check_format(img: Image.Image) -> None:
    if img.format in ("JPEG", "MPO"):
        raise DecodeError("it is a JPEG: lossy compression changes class indices along every edge; save masks as PNG "
                          "or TIFF")


def _indices(img: Image.Image) -> np.ndarray:
    # a palette's indices, never its colours; grey as it is
    if img.mode in ("P", "L", "1"):
        return np.array(img, dtype=np.uint8)  # mode 1: bits as 0 and 1, not the 0 and 255 of a conversion
    if img.mode in SIXTEEN_BIT_MODES:
        return _fitted(np.asarray(img), f"mode {img.mode}")
    if img.mode == "F":
        raise DecodeError("its samples are 32-bit floats (mode F): a mask holds class indices, integers")
    holds = _MODE_HOLDS.get(img.mode, "no class indices this app reads")
    raise DecodeError(f"its mode is {img.mode} ({holds}): a mask holds one class index a pixel; {_AS_INDICES}")


def _fitted(values: np.ndarray, found: str) -> np.ndarray:
    # uint8 from a 1-byte type, else uint16 (by the type, not the values: a set's masks alike); no value beyond them
    if values.dtype.kind not in "uib":
        raise DecodeError(f"its samples are {found}: a mask holds class indices, integers")
    low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
    if low < 0 or high > 65535:
        raise DecodeError(f"its samples ({found}) run from {low} to {high}: a mask's class indices are 0..65535")
    return values.astype(np.uint8 if values.dtype.itemsize == 1 else np.uint16)


def _tiff_mask(path: str, max_pixels: int | None) -> np.ndarray:
    # tifffile loads where a TIFF is met: a run of PNG masks never imports it
    import tifffile

    try:
        with tifffile.TiffFile(path) as tif:
            series = tif.series[0]
            bands = {axis: size for axis, size in zip(series.axes, series.shape, strict=True)
                     if axis not in "YX" and size > 1}
            if bands:
                found = ", ".join(f"{axis}={size}" for axis, size in bands.items())
                raise DecodeError(f"it holds more than one band ({found}, axes {series.axes}): a mask is one band; "
                                  f"{_AS_INDICES}")
            check_pixels(series.shape[series.axes.index("X")], series.shape[series.axes.index("Y")], max_pixels)
            if series.dtype.kind == "f":
                raise DecodeError(f"its samples are {series.dtype} floats: a mask holds class indices, integers")
            values = series.asarray()
            photometric = tif.pages.first.photometric
    except DecodeError:
        raise
    except _TIFF_ERRORS as error:
        raise DecodeError(f"cannot decode TIFF mask: {error}") from error
    values = values.reshape(values.shape[series.axes.index("Y")], values.shape[series.axes.index("X")])
    if values.dtype == np.bool_:  # a 1-bit raster: white is 1, as Pillow reads one
        values = values != (photometric == tifffile.PHOTOMETRIC.MINISWHITE)
    return _fitted(values, str(series.dtype))
