"""A patch's mask read where it lies (segmentation with data.patches): a label raster at an integer fraction of its
image's size, sampled by nearest neighbour, or GeoJSON polygons (polygons.py); never a whole image's mask."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol

import numpy as np

from app.data.masked import MaskedFileSplit, MaskRule
from app.data.pixels.decode import DecodeError
from app.data.pixels.label_masks import check_mask_values, mask_size, read_mask
from app.data.slides.layouts import Layout
from app.data.slides.polygons import indexes, read_polygons
from app.data.slides.regions import Slide, read_region, slide_of
from app.data.source import bad_sample_reason
from app.errors import DataError

POLYGON_SUFFIXES = (".geojson", ".json")


@dataclass(frozen=True)
class Window:
    """A patch's place: its corner and extent at level 0, and its size as read, (height, width) each."""

    corner: tuple[float, float]
    extent: tuple[float, float]
    size: tuple[int, int]

    @property
    def scale(self) -> tuple[float, float]:  # level-0 pixels a patch pixel, down and across
        return self.extent[0] / self.size[0], self.extent[1] / self.size[1]


class RegionMask(Protocol):
    """One image's annotation, read a patch at a time."""

    path: str

    def read(self, window: Window) -> np.ndarray: ...  # (height, width) class indices of the rule's type


@dataclass(frozen=True, kw_only=True)
class RasterMask:
    """A label raster `factor` times smaller than its image on each side (1: the same size)."""

    path: str
    factor: int
    shape: tuple[int, int]  # its own (height, width)
    raster: Slide | None  # a TIFF's, read by region; None: a PNG, read whole
    dtype: str

    def read(self, window: Window) -> np.ndarray:
        rows, cols = (np.minimum(((window.corner[a] + (np.arange(window.size[a]) + 0.5) * window.scale[a])
                                  // self.factor).astype(np.int64), self.shape[a] - 1) for a in (0, 1))
        top, left = int(rows[0]), int(cols[0])
        height, width = int(rows[-1]) - top + 1, int(cols[-1]) - left + 1
        if self.raster is not None:
            values = read_region(self.raster, 0, (top, left), (height, width))[:, :, 0]
        else:
            values = read_mask(self.path, None)[top:top + height, left:left + width]
        return values[np.ix_(rows - top, cols - left)].astype(self.dtype, copy=False)


@dataclass(frozen=True)
class PolygonMask:
    """GeoJSON polygons in the image's level-0 pixels; pixels no polygon covers take `unannotated`."""

    path: str
    classes: tuple[str, ...]
    unannotated: int
    dtype: str

    def read(self, window: Window) -> np.ndarray:
        mask = np.full(window.size, self.unannotated, self.dtype)
        return indexes.of(self.path, list(self.classes)).fill(mask, window.corner, window.scale)


def region_mask_of(path: str, image: Slide, *, rule: MaskRule, max_chunk_pixels: int) -> RegionMask:
    """`path` (its image's annotation) as a reader of patches: a DecodeError naming what does not fit the image."""
    if PurePath(path).suffix.lower() in POLYGON_SUFFIXES:
        if rule.unannotated is None:
            raise DecodeError("its polygons leave pixels unannotated, and neither data.ignore_index nor "
                              "data.masks_background says what those are: set one (255 to leave them out of the "
                              "loss and the figures, or the class the background is)")
        read_polygons(path, list(rule.names))  # its classes checked once, here; each worker indexes it again
        return PolygonMask(path=path, classes=rule.names, unannotated=rule.unannotated, dtype=rule.dtype)
    height, width = image.levels[0]
    own = mask_size(path)
    factor = max(round(width / own[1]), 1)
    if any(abs(side / factor - size) >= 1 for side, size in ((height, own[0]), (width, own[1]))):
        raise DecodeError(f"it is {own[1]}×{own[0]} (width×height) where its image is {width}×{height}: a label "
                          "raster is the image's size or an integer fraction of it (a half, a quarter, ...) on both "
                          "sides")
    return RasterMask(path=path, factor=factor, shape=own, raster=_tiled(path, own, max_chunk_pixels),
                      dtype=rule.dtype)


def _tiled(path: str, size: tuple[int, int], max_chunk_pixels: int) -> Slide | None:
    """A TIFF raster's header, to read it by region; None for a PNG small enough to read whole a patch."""
    with open(path, "rb") as file:
        tiff = file.read(2) in (b"II", b"MM")
    if tiff:
        raster = slide_of(os.fspath(path), max_chunk_pixels, "tifffile")
        if raster.bands != 1:
            raise DecodeError(f"it holds {raster.bands} bands: a label raster is one band of class indices")
        return raster
    if size[0] * size[1] > max_chunk_pixels:
        raise DecodeError(f"its {size[1]}×{size[0]} pixels are one chunk (above data.patches.max_chunk_pixels="
                          f"{max_chunk_pixels}): save it as a tiled TIFF, e.g. tifffile's imwrite(..., "
                          "tile=(512, 512)), so a patch reads its part alone")
    return None


def read_checked(mask: RegionMask, window: Window, rule: MaskRule) -> np.ndarray:
    """`mask` at `window`, every value a class or the ignore index; a DecodeError naming the mask where not."""
    try:
        values = mask.read(window)
    except Exception as error:
        raise DecodeError(f"its mask {mask.path}: {bad_sample_reason(error)}") from error
    if wrong := check_mask_values(values, rule.classes, rule.ignore_index):
        raise DecodeError(f"its mask {mask.path}: {wrong}")
    return values


def annotations_of(images: MaskedFileSplit, of: dict[int, Layout], patches, unreadable: dict[str, str] | None) \
        -> dict[int, RegionMask]:
    """Each image's annotation reader (by index); a misfit's DataError, or (`unreadable`) that image left out."""
    masks = {}
    for i, layout in of.items():
        if not layout.valid.any():
            continue
        try:
            masks[i] = region_mask_of(images.masks[i], layout.slide, rule=images.rule,
                                      max_chunk_pixels=patches.max_chunk_pixels)
        except (DecodeError, OSError) as error:
            said = "is missing" if isinstance(error, FileNotFoundError) else \
                f"cannot be read: {bad_sample_reason(error)}"
            if unreadable is None:
                raise DataError(f"{images.paths[i]}: its mask {images.masks[i]} {said}") from error
            unreadable[images.paths[i]] = f"{images.paths[i]}: its mask {images.masks[i]} {said}"
    return masks


def listed_annotations(rows: MaskedFileSplit, paths: list[str], layouts: list[Layout], patches) -> list[RegionMask]:
    """A table of patches' annotation an image of `paths` (its rows name one mask)."""
    first = {path: rows.masks[k] for k, path in reversed(list(enumerate(rows.paths)))}
    for k, path in enumerate(rows.paths):
        if rows.masks[k] != first[path]:
            raise DataError(f"{path} has two masks in the table, {first[path]} and {rows.masks[k]}: an image's "
                            "patches read one annotation")
    images = MaskedFileSplit(paths, [first[path] for path in paths], rows.rule)
    return list(annotations_of(images, dict(enumerate(layouts)), patches, None).values())
