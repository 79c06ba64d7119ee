"""Regions of large images, never the whole: a TIFF pyramid's levels through tifffile's zarr store (a scanner's file:
app/data/pixels/scanner_files.py), so a read decodes only the chunks it touches; a file of chunks too large: refused."""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import tifffile
from PIL import Image

from app.data.pixels import scanner_files
from app.data.pixels.decode import DecodeError
from app.data.pixels.images import HEAD_BYTES, JPEG_START, PNG_START, TIFF_MAGIC, jpeg_frame, read_bytes, rgb_from_bytes
from app.data.pixels.tiff import BAND_AXES, READ_TYPES, page_nodata
from app.data.slides.chunks import DecodedChunks, bands_last
from app.data.source import bad_sample_reason

OPEN_FILES = 8  # files a worker keeps open: a slide's header and tile offsets are read once, not once a patch
TILE_IT = ("tile it, e.g. `vips tiffsave in out.tif --tile --pyramid --compression jpeg` or tifffile's "
           "imwrite(..., tile=(512, 512), subifds=...)")
_RESOLUTION_UNIT_UM = {2: 25_400.0, 3: 10_000.0}  # TIFF ResolutionUnit: inch, centimetre, in µm


@dataclass(frozen=True, kw_only=True)
class Slide:
    """A large image from its header: each level's (height, width), its chunk's, bands, type, µm a pixel, no-data."""

    path: str
    levels: tuple[tuple[int, int], ...]
    chunk: tuple[int, int]  # level 0's tile or strip (or the whole image, for a file that is not tiled)
    bands: int
    dtype: str
    tiff: bool = True  # else a PNG, JPEG, WebP or BMP: one level, decoded whole
    tiled: bool = False  # a TIFF in tiles, not strips
    mpp: float | None = None
    nodata: float | None = None
    openslide: bool = False  # read through OpenSlide: 8-bit RGB, its tiles
    alpha: int | None = None  # an RGBA TIFF's ExtraSamples (1 premultiplied, 2 not): read as RGB on white, as OpenSlide

    def downsample(self, level: int) -> float:
        return self.levels[0][1] / self.levels[level][1]


def slide_of(path: str | os.PathLike, max_chunk_pixels: int, reader: str = "auto") -> Slide:
    """`path`'s levels and chunks; a DecodeError for chunks over `max_chunk_pixels` or a type not uint8/uint16."""
    path = os.fspath(path)
    if scanner_files.through_openslide(path, reader):
        return Slide(path=path, bands=3, dtype="uint8", tiled=True, openslide=True, **scanner_files.header(path))
    with open(path, "rb") as file:
        tiff = file.read(4) in TIFF_MAGIC
    slide = _tiff_slide(path) if tiff else _flat_slide(path)
    if slide.chunk[0] * slide.chunk[1] > max_chunk_pixels:
        shape = "tiles" if slide.tiled else "strips" if tiff else "one chunk"
        raise DecodeError(f"its {slide.levels[0][1]}×{slide.levels[0][0]} pixels are stored in {shape} of "
                          f"{slide.chunk[1]}×{slide.chunk[0]} (above data.patches.max_chunk_pixels="
                          f"{max_chunk_pixels}): "
                          f"a patch would decode the whole chunk; {TILE_IT}")
    return slide


def _tiff_slide(path: str) -> Slide:
    try:
        with tifffile.TiffFile(path) as tif:
            series, page = tif.series[0], tif.pages.first
            sizes = tuple(_size(level.shape, level.axes) for level in series.levels)
            if series.dtype not in READ_TYPES:
                raise DecodeError(f"its samples are {series.dtype}: data.dtype reads uint8 or uint16 images")
            bands = int(np.prod([n for axis, n in zip(series.axes, series.shape, strict=True) if axis in BAND_AXES]))
            chunk = (page.tilelength, page.tilewidth) if page.is_tiled else (page.rowsperstrip or sizes[0][0],
                                                                                 sizes[0][1])
            alpha = _alpha(page)
            return Slide(path=path, levels=sizes, chunk=(min(chunk[0], sizes[0][0]), chunk[1]),
                         bands=bands - (alpha is not None), dtype=str(series.dtype), tiled=page.is_tiled,
                         mpp=_mpp(page), alpha=alpha,
                         nodata=page_nodata(page, series.dtype))
    except (tifffile.TiffFileError, ValueError, IndexError, KeyError) as error:
        raise DecodeError(f"cannot read TIFF: {error}") from error


def _flat_slide(path: str) -> Slide:
    """A PNG, JPEG, WebP or BMP from its header (the chunk guard, not Pillow's): one level, one chunk, decoded whole."""
    with open(path, "rb") as file:
        head = file.read(HEAD_BYTES)
    if head[:8] == PNG_START and len(head) > 25:  # IHDR: width, height, bit depth, colour type
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        dtype, bands = ("uint16" if head[24] == 16 else "uint8"), (1 if head[25] in (0, 4) else 3)
    elif head[:3] == JPEG_START and (frame := jpeg_frame(head)) is not None:
        (width, height, components), dtype = frame, "uint8"
        bands = 1 if components == 1 else 3
    else:
        try:
            with Image.open(path) as opened:
                (width, height), mode = opened.size, opened.mode
        except (OSError, Image.DecompressionBombError) as error:
            raise DecodeError(f"cannot read its header: {error}") from error
        dtype, bands = ("uint16" if mode.startswith("I;16") else "uint8"), (1 if mode in ("L", "1") else 3)
    return Slide(path=path, levels=((height, width),), chunk=(height, width), bands=bands, dtype=dtype, tiff=False)


def _alpha(page) -> int | None:  # an RGBA page's ExtraSamples: 1 associated alpha, 2 unassociated; else None
    extra = tuple(int(e) for e in page.extrasamples or ())
    if page.photometric == tifffile.PHOTOMETRIC.RGB and page.samplesperpixel == 4 and extra in ((1,), (2,)):
        return extra[0]
    return None


def _size(shape: tuple[int, ...], axes: str) -> tuple[int, int]:
    return shape[axes.index("Y")], shape[axes.index("X")]


def _mpp(page) -> float | None:
    """µm a pixel at level 0 from the TIFF's XResolution and ResolutionUnit (inch or cm); None where not given."""
    resolution, unit = page.tags.get("XResolution"), page.tags.get("ResolutionUnit")
    if resolution is None or unit is None or int(unit.value) not in _RESOLUTION_UNIT_UM:
        return None
    numerator, denominator = resolution.value
    return _RESOLUTION_UNIT_UM[int(unit.value)] * denominator / numerator if numerator else None


class OpenFiles:
    """A worker's open slides, the least recently read closed past `OPEN_FILES`; a level a zarr array."""

    def __init__(self, size: int = OPEN_FILES):
        self.size, self.files = size, OrderedDict()

    def level(self, path: str, level: int):
        """(the zarr array of `path`'s level, its axes)."""
        if path not in self.files:
            stat = os.stat(path)  # the file as opened: its chunks are kept under it (kept_as)
            tif = tifffile.TiffFile(path)
            self.files[path] = (tif, {}, (path, stat.st_mtime_ns, stat.st_size))
            while len(self.files) > self.size:
                self.files.popitem(last=False)[1][0].close()
        self.files.move_to_end(path)
        tif, levels, _ = self.files[path]
        if level not in levels:
            import zarr  # noqa: PLC0415 - every loader worker imports app.data; only patch runs pay its 0.2 s

            series = tif.series[0]
            levels[level] = (zarr.open(series.aszarr(level=level), mode="r"), series.levels[level].axes)
        return levels[level]

    def kept_as(self, path: str, level: int) -> tuple:
        # an open level's key among the kept chunks: its file as opened, so a file written again and opened again is
        # read again, while the open one reads on what it opened
        return *self.files[path][2], level

    def close_all(self) -> None:
        while self.files:
            self.files.popitem()[1][0].close()


_open = OpenFiles()
_chunks = DecodedChunks()


def close_open_files() -> None:
    """This process's open slides closed (the training process, once it has read their masks)."""
    _open.close_all()
    _chunks.drop_all()
    scanner_files.opened.close_all()


def read_region(slide: Slide, level: int, corner: tuple[int, int], size: tuple[int, int],
                cache_bytes: int = 0) -> np.ndarray:
    """(height, width, bands) of `slide`'s `level` from `corner` (top, left) in that level's pixels: only the chunks
    it touches decoded (not a TIFF: whole), up to `cache_bytes` kept (chunks.py); a DecodeError where unreadable."""
    try:
        return _region(slide, level, (corner, size), cache_bytes)
    except DecodeError:
        raise
    except Exception as error:  # imagecodecs', tifffile's, zarr's and OpenSlide's own errors: the file's fault
        raise DecodeError(f"its level {level} cannot be read at x={corner[1]}, y={corner[0]} "
                          f"({bad_sample_reason(error)})") from error


def _region(slide: Slide, level: int, place: tuple[tuple[int, int], tuple[int, int]], cache_bytes: int) -> np.ndarray:
    corner, size = place
    (top, left), (height, width) = corner, size
    if slide.openslide:
        return scanner_files.read_region(slide.path, level, (corner, size), downsample=slide.downsample(level))
    if slide.tiff:
        array, axes = _open.level(slide.path, level)
        region = _chunks.region(_open.kept_as(slide.path, level), (array, axes), cache_bytes, place) \
            if cache_bytes else None
        if region is None:
            window = tuple(slice(top, top + height) if axis == "Y" else slice(left, left + width) if axis == "X"
                           else slice(None) for axis in axes)
            region = bands_last(np.asarray(array[window]), axes)
        return region if slide.alpha is None else scanner_files.on_white(region, premultiplied=slide.alpha == 1)
    image = rgb_from_bytes(read_bytes(slide.path, None), None, None)
    region = image[top:top + height, left:left + width]
    return np.ascontiguousarray(region if region.ndim == 3 else region[:, :, None])

