"""A TIFF read by tifffile (imagecodecs decodes its strips and tiles): the first series at the smallest pyramid level
that covers what the transforms need, only its strips or tiles read, bands last (H, W, bands) in the file's type."""

from __future__ import annotations

import logging
import math
import os

import numpy as np
import tifffile

from app.data.pixels.decode import DecodeError, check_pixels

BAND_AXES = "SC"  # samples of a pixel, or channels (OME); a stack of same-size pages (I, Q) is read as bands too
PAGE_AXES = "IQ"
READ_TYPES = (np.uint8, np.uint16)
GDAL_NODATA = 42113  # GDAL's TIFF tag: the no-data value, as ASCII

log = logging.getLogger(__name__)
_unheld: set[tuple[str, str]] = set()  # (GDAL_NODATA text, pixel type) said already


def read_tiff(path: str | os.PathLike, *, min_short_side: int | None, max_pixels: int | None) -> np.ndarray:
    """`path` as (H, W, bands) uint8 or uint16; a DecodeError for an unreadable, other-typed, too large or Z/T stack."""
    try:
        with tifffile.TiffFile(path) as tif:
            level = _chosen(tif, min_short_side, max_pixels)
            return _bands_last(_integers(level.asarray(), level.keyframe.photometric), level.axes)
    except DecodeError:
        raise
    except (tifffile.TiffFileError, ValueError, IndexError, KeyError, RuntimeError) as error:
        raise DecodeError(f"cannot decode TIFF: {error}") from error


def band_count(path: str | os.PathLike) -> int:
    """The bands of a TIFF's image, from its header alone."""
    try:
        with tifffile.TiffFile(path) as tif:
            series = tif.series[0]
            return int(np.prod([size for axis, size in zip(series.axes, series.shape, strict=True)
                                if axis in BAND_AXES + PAGE_AXES]))
    except (tifffile.TiffFileError, ValueError, IndexError) as error:
        raise DecodeError(f"cannot decode TIFF: {error}") from error


def decoded_bytes(path: str | os.PathLike, min_short_side: int | None, max_pixels: int | None) -> int:
    """The bytes of the array `read_tiff` would make of `path`, from its header alone; 0 for one it would refuse."""
    try:
        with tifffile.TiffFile(path) as tif:
            level = _chosen(tif, min_short_side, max_pixels)
            return int(np.prod(level.shape)) * level.dtype.itemsize
    except (tifffile.TiffFileError, ValueError, IndexError, OSError):  # DecodeError too: refused, counts nothing
        return 0


def nodata_of(path: str | os.PathLike) -> float | None:
    """A GeoTIFF's no-data value (`page_nodata`), or None: not a TIFF, none given, none its pixels hold, unreadable."""
    try:
        with tifffile.TiffFile(path) as tif:
            return page_nodata(tif.pages.first, tif.series[0].dtype)
    except (tifffile.TiffFileError, ValueError, IndexError, OSError):
        return None


def page_nodata(page, dtype) -> float | None:
    """`page`'s GDAL_NODATA value as `held_nodata` keeps it; None where none is given."""
    tag = page.tags.get(GDAL_NODATA)
    return None if tag is None else held_nodata(str(tag.value).strip("\0 "), dtype, page.parent.filehandle.path)


def held_nodata(value: str | float | None, dtype, path: str) -> float | None:
    """A no-data `value` a pixel of `dtype` can hold; None (said once) for NaN, out of range, fractional, text."""
    if value is None:
        return None
    try:
        number = float(str(value).replace(",", "."))  # GDAL writes the C locale's, some tools a decimal comma
    except ValueError:
        number = math.nan
    dtype = np.dtype(dtype)
    if dtype.kind in "ui" and math.isfinite(number) and number == int(number) \
            and np.iinfo(dtype).min <= number <= np.iinfo(dtype).max:
        return number
    if (str(value), dtype.name) not in _unheld:  # one line a (value, type): a slide set tags every file alike
        _unheld.add((str(value), dtype.name))
        log.warning("no-data value %r of %s (and of any file tagged alike) is no value a %s pixel can hold: "
                    "read as none, every pixel counted", value, path, dtype.name)
    return None


def _chosen(tif: tifffile.TiffFile, min_short_side: int | None, max_pixels: int | None):
    """The level `read_tiff` reads; a DecodeError where it would refuse it (its pixels, its sample type)."""
    level = _level(tif.series[0], min_short_side)
    height, width = _size(level)
    check_pixels(width, height, max_pixels)
    _check_type(level.dtype)
    return level


def _size(level) -> tuple[int, int]:
    return level.shape[level.axes.index("Y")], level.shape[level.axes.index("X")]


def _level(series, min_short_side: int | None):
    """The smallest level of a pyramid whose short side is still at least `min_short_side` (else level 0)."""
    chosen = series.levels[0]
    if min_short_side is None:
        return chosen
    for level in series.levels[1:]:
        if min(_size(level)) < min_short_side:
            break
        chosen = level
    return chosen


def _integers(array: np.ndarray, photometric: int) -> np.ndarray:
    """A 1-bit (bilevel) image as 8-bit grey, 0 and 255, as Pillow reads one; other types as they are."""
    if array.dtype != np.bool_:
        return array
    white = array != (photometric == tifffile.PHOTOMETRIC.MINISWHITE)  # a set bit is black there (fax, scans)
    return white.astype(np.uint8) * np.uint8(255)


def _check_type(dtype: np.dtype) -> None:
    if dtype not in READ_TYPES and dtype != np.bool_:
        raise DecodeError(f"its samples are {dtype} (an elevation model or a float raster?): data.dtype reads uint8 "
                          "or uint16 images for now; convert it, or leave it out")


def _bands_last(array: np.ndarray, axes: str) -> np.ndarray:
    """`array` of tifffile's `axes` as (H, W, bands), the band axis (S, C, pages) last; a stack in Z or T refused."""
    bands = [i for i, axis in enumerate(axes) if axis in BAND_AXES + PAGE_AXES and array.shape[i] > 1]
    other = [f"{axis}={array.shape[i]}" for i, axis in enumerate(axes)
             if axis not in "YX" + BAND_AXES + PAGE_AXES and array.shape[i] > 1]
    if other or len(bands) > 1:
        found = ", ".join(other) or " and ".join(f"{axes[i]}={array.shape[i]}" for i in bands)
        raise DecodeError(f"it holds a stack ({found}, axes {axes}), not one image: write one image a file, its bands "
                          "as samples or channels")
    order = [axes.index("Y"), axes.index("X"), *bands]
    image = np.transpose(array, order + [i for i in range(array.ndim) if i not in order])
    image = image.reshape(image.shape[0], image.shape[1], -1)
    return np.ascontiguousarray(image)
