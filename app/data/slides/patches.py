"""Patches of large images as a split's samples, read region by region (regions.py): drawn from (seed, epoch, index,
draw) alone, or a grid's; a patch short of data.patches.min_foreground is never a sample."""

from __future__ import annotations

import copy
import dataclasses
import logging
from abc import ABC, abstractmethod

import cv2
import numpy as np

from app.data.masked import MaskedFileSplit, MaskRule
from app.data.pixels.bands import fit_bands
from app.data.pixels.decode import Decode, DecodeError
from app.data.slides.layouts import Layout, layout_of, layouts_of, warn_of_overlap, why_none
from app.data.slides.region_masks import RegionMask, Window, annotations_of, listed_annotations, read_checked
from app.data.slides.regions import read_region
from app.data.source import FileSplit, Source, bad_sample_reason
from app.data.split import Drawn, Place
from app.errors import BadSampleError, DataError

NAMED = 10  # images left out named in the log line, at most

log = logging.getLogger(__name__)


class PatchSplit(ABC):
    """Patches of `images` (a FileSplit, `layouts` theirs) cut by `patches`; a mode is a subclass, its own `where`."""

    bands = None  # counted off the images
    # data.task=segmentation: each image's annotation (region_masks.py), read where a patch lies; None: no masks
    masks: tuple[MaskRule, list[RegionMask]] | None = None
    mask_dtype: str | None = None

    def __init__(self, images: FileSplit, layouts: list[Layout], patches, image_of: np.ndarray, labels=None):
        self.images, self.layouts, self.patches, self.size = images, layouts, patches, tuple(patches.size)
        self.image_of = np.asarray(image_of, np.int32)
        self.labels = images.labels[self.image_of] if labels is None else labels

    def with_masks(self, rule: MaskRule, masks: list[RegionMask]) -> PatchSplit:
        """A sample an (image, mask) pair: `masks` a reader an image of `images`, their values by `rule`."""
        self.masks, self.mask_dtype = (rule, masks), rule.dtype
        return self

    def __len__(self) -> int:
        return len(self.image_of)

    @abstractmethod  # (image, top, left) of sample i, in level-0 pixels; a random patch's from `drawn`
    def where(self, i: int, drawn: Drawn | None = None) -> tuple[int, int, int]: ...

    def take(self, picked: np.ndarray) -> PatchSplit:
        part = copy.copy(self)  # the images and layouts shared; a mode's own rows taken by its override
        part.image_of, part.labels = self.image_of[picked], self.labels[picked]
        return part

    def fixed(self, *, draws: int | None, seed: int) -> PatchSplit:  # prepare's: a grid or a list is fixed already
        return self

    def region_of(self, i: int, drawn: Drawn | None = None) -> tuple[Layout, tuple[int, int]]:
        """Sample i's image's layout and the region's (top, left) in the pixels of the level it is read at."""
        image, top, left = self.where(i, drawn)
        layout = self.layouts[image]
        scale, (height, width) = layout.slide.downsample(layout.level), layout.slide.levels[layout.level]
        return layout, (min(int(top / scale), height - layout.read[0]), min(int(left / scale), width - layout.read[1]))

    def fetch(self, i: int, decode: Decode | None = None, drawn: Drawn | None = None):
        """Sample i's region, at the patch size (with masks: and its mask, of the same place): only the tiles it
        touches read; BadSampleError if unreadable."""
        layout, (y, x) = self.region_of(i, drawn)
        try:
            region = read_region(layout.slide, layout.level, (y, x), layout.read,
                                 cache_bytes=self.patches.chunk_cache_mib << 20)
        except Exception as exc:
            raise BadSampleError(i, self.describe(i, drawn), bad_sample_reason(exc)) from exc
        if layout.read != self.size:  # between two levels: the finer one read, shrunk the rest of the way
            shrunk = cv2.resize(region, self.size[::-1], interpolation=cv2.INTER_AREA)
            region = shrunk if shrunk.ndim == 3 else shrunk[:, :, None]
        if self.masks is None:
            return region
        (rule, masks), scale = self.masks, layout.slide.downsample(layout.level)
        window = Window(corner=(round(y * scale), round(x * scale)),  # the region's place at level 0, as read
                        extent=(round(layout.read[0] * scale), round(layout.read[1] * scale)), size=self.size)
        try:
            return region, read_checked(masks[int(self.image_of[i])], window, rule)
        except DecodeError as exc:
            raise BadSampleError(i, self.describe(i, drawn), str(exc)) from exc

    def decode(self, i: int, raw, decode: Decode | None = None):
        """The region fitted to the run's bands and type (with masks: the pair, its mask as read)."""
        region, mask = raw if self.masks is not None else (raw, None)
        pixels = (decode or Decode()).pixels
        try:
            fitted = fit_bands(region, channels=pixels.channels, bands=pixels.bands, dtype=pixels.dtype)
        except DecodeError as exc:
            raise BadSampleError(i, self.describe(i), str(exc)) from exc
        return fitted if mask is None else (fitted, mask)

    def read(self, i: int, decode: Decode | None = None, drawn: Drawn | None = None):
        return self.decode(i, self.fetch(i, decode, drawn), decode)

    def place_of(self, seed: int) -> Place:
        """(index, epoch, draw) → "image:x:y", sample index's image (in this split) and corner: samples.csv's."""
        def place(i: int, epoch: int, draw: int) -> str:
            image, top, left = self.where(i, (seed, epoch, draw))
            return f"{image}:{left}:{top}"
        return place

    def largest_decode_bytes(self, decode: Decode) -> tuple[int, int]:
        """The most one patch holds as it is read: every chunk it can touch decoded, the region, and the patch."""
        return max((layout.read_bytes(self.size) for layout in self.layouts), default=0), 0

    def level_bytes(self) -> dict[tuple[str, int], int]:
        """Each (image, level) its patches are read at: its decoded bytes in whole chunks, what a worker can keep."""
        return {(layout.slide.path, layout.level): layout.level_bytes() for layout in self.layouts}

    def describe(self, i: int, drawn: Drawn | None = None) -> str:
        image, top, left = self.where(i, drawn)
        return f"{self.images.paths[image]} (the patch at x={left}, y={top})"

    def files(self) -> list[str]:
        return list(self.images.paths)

    def nodata(self, i: int) -> float | None:
        return self.layouts[int(self.image_of[i])].slide.nodata  # its slide's


class GridPatches(PatchSplit):
    """Every foreground patch of each image's grid (data.patches.stride): validation, evaluate, predict, mode=grid."""

    def __init__(self, images: FileSplit, layouts: list[Layout], patches):
        cells = [layout.cells() for layout in layouts]
        super().__init__(images, layouts, patches, np.repeat(np.arange(len(layouts)), [len(c) for c in cells]))
        self.cell_of = np.concatenate(cells).astype(np.int32) if cells else np.zeros(0, np.int32)

    def where(self, i: int, drawn: Drawn | None = None) -> tuple[int, int, int]:
        image = int(self.image_of[i])
        return (image, *self.layouts[image].corner(int(self.cell_of[i])))

    def take(self, picked: np.ndarray) -> GridPatches:
        part = super().take(picked)
        part.cell_of = self.cell_of[picked]
        return part


class RandomPatches(PatchSplit):
    """data.patches.per_image patches an image an epoch, each anywhere on its foreground, by (seed, epoch, i, draw)."""

    def __init__(self, images: FileSplit, layouts: list[Layout], patches):
        super().__init__(images, layouts, patches, np.repeat(np.arange(len(layouts)), patches.per_image))
        self.keys: np.ndarray | None = None  # each sample's in the draw, where a `take` kept them; else its index
        self._cells: dict[int, np.ndarray] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_cells": {}}  # listed again in each process, as it first draws on an image

    def where(self, i: int, drawn: Drawn | None = None) -> tuple[int, int, int]:
        image = int(self.image_of[i])
        layout = self.layouts[image]
        if image not in self._cells:
            self._cells[image] = layout.cells()
        cells = self._cells[image]
        seed, epoch, draw = drawn or (0, 0, 0)
        rng = np.random.default_rng([seed, epoch, i if self.keys is None else int(self.keys[i]), draw])
        return (image, *layout.corner(int(cells[rng.integers(len(cells))])))

    def take(self, picked: np.ndarray) -> RandomPatches:
        part = super().take(picked)
        part.keys = np.asarray(picked) if self.keys is None else self.keys[picked]
        return part

    def describe(self, i: int, drawn: Drawn | None = None) -> str:
        if drawn is None:
            return f"{self.images.paths[int(self.image_of[i])]} (a random patch)"
        return super().describe(i, drawn)

    def fixed(self, *, draws: int | None, seed: int) -> PatchSplit:  # the grid, or `draws` an image drawn by `seed`
        fixed = self._fixed(draws=draws, seed=seed)
        if self.masks is None:
            return fixed
        rule, masks = self.masks
        of = dict(zip(self.images.paths, masks, strict=True))
        return fixed.with_masks(rule, [of[path] for path in fixed.images.paths])  # the grid may keep fewer images

    def _fixed(self, *, draws: int | None, seed: int) -> PatchSplit:
        if draws is None:
            return _patch_split(self.images, self.patches, grid=True)[0]
        image_of, corners = [], []
        for image, layout in enumerate(self.layouts):
            cells = layout.cells()
            picked = np.random.default_rng([seed, image]).choice(len(cells), min(draws, len(cells)), replace=False)
            image_of += [image] * len(picked)
            corners += [layout.corner(int(cells[k])) for k in np.sort(picked)]
        image_of = np.array(image_of, np.int32)
        return ListedPatches(self.images, self.layouts, self.patches, places=(
            image_of, np.array(corners, np.int64).reshape(-1, 2), self.images.labels[image_of]))


class ListedPatches(PatchSplit):
    """Patches at listed corners: a table's own (data.columns.x, y), each its own label; or prepare's draws."""

    def __init__(self, images: FileSplit, layouts: list[Layout], patches, *, places: tuple):
        image_of, corners, labels = places  # a patch's image, its (top, left) at level 0, its label
        super().__init__(images, layouts, patches, image_of, labels=labels)
        self.corners = np.asarray(corners)

    def where(self, i: int, drawn: Drawn | None = None) -> tuple[int, int, int]:
        return int(self.image_of[i]), int(self.corners[i][0]), int(self.corners[i][1])

    def take(self, picked: np.ndarray) -> ListedPatches:
        part = super().take(picked)
        part.corners = self.corners[picked]
        return part


def patched(source: Source, patches, *, skip: bool = False) -> Source:
    """`source`'s splits made patches, by image; those without one (or unreadable, with `skip`) named in the log."""
    unreadable: dict[str, str] | None = {} if skip else None
    built = {name: _listed_split(split, source.corners[name], patches) if name in source.corners else
             _patch_split(split, patches, grid=name != "train" or patches.mode.value == "grid", unreadable=unreadable)
             for name, split in (("train", source.train), ("val", source.val), ("test", source.test))
             if split is not None}
    gone = [layout for _, _, left in built.values() for layout in left]
    _warn_of_unreadable(unreadable or {})
    for name, split_name in (("train", "training"), ("val", "validation")):
        if not len(built[name][0]):
            left = built[name][2]
            raise DataError(f"the {split_name} split has no patch: none of its {len(left)} images has one (the "
                            f"first, {left[0].slide.path}: {why_none(left[0], patches)})" if left else
                            f"the {split_name} split has no image to take patches of" + (
                                f" that can be read ({next(iter(unreadable.values()))})" if unreadable else ""))
    if gone:
        log.warning("left out for want of a patch (%d; split.json lists them under patches): %s", len(gone),
                    "; ".join(f"{layout.slide.path}: {why_none(layout, patches)}" for layout in gone[:NAMED]) +
                    (f"; and {len(gone) - NAMED} more" if len(gone) > NAMED else ""))
    (train, kept, _), (val, _, _) = built["train"], built["val"]
    weights = None if source.train_weights is None else \
        source.train_weights[kept] if isinstance(train, ListedPatches) else source.train_weights[kept][train.image_of]
    counts = {name: {"images": len(split.layouts), "patches": len(split)} for name, (split, _, _) in built.items()}
    warn_of_overlap(counts, patches)
    layouts = [layout for split, _, _ in built.values() for layout in split.layouts]
    read_by = {"openslide": sum(layout.slide.openslide for layout in layouts)}
    read_by["tifffile"] = len(layouts) - read_by["openslide"]
    described = {"split_by": "image", "size": list(patches.size), "mode": patches.mode.value, **counts,
                 "without_foreground": sorted(layout.slide.path for layout in gone if layout.fits),
                 "smaller_than_a_patch": sorted(layout.slide.path for layout in gone if not layout.fits),
                 "unreadable": dict(sorted((unreadable or {}).items())),
                 "read_by": read_by}
    return dataclasses.replace(source, train=train, val=val, test=built["test"][0] if "test" in built else None,
                               train_weights=weights, split={**source.split, "patches": described})


def _warn_of_unreadable(unreadable: dict[str, str]) -> None:
    if unreadable:
        log.warning("left out, unreadable (data.on_bad_sample=skip; split.json lists them under patches): %s",
                    "; ".join(list(unreadable.values())[:NAMED]) +
                    (f"; and {len(unreadable) - NAMED} more" if len(unreadable) > NAMED else ""))


def _listed_split(rows: FileSplit, corners: np.ndarray, patches) -> tuple[PatchSplit, np.ndarray, list[str]]:
    """A table's patches (data.columns.x, y) with their own labels; an image's label their most common."""
    paths = list(dict.fromkeys(rows.paths))
    at = {path: i for i, path in enumerate(paths)}
    image_of = np.array([at[path] for path in rows.paths], np.int32)
    layouts = [layout_of(path, patches, grid=True, masked=False) for path in paths]  # each row's edge: checked
    labels = np.array([np.bincount(rows.labels[image_of == image]).argmax() for image in range(len(paths))])
    split = ListedPatches(FileSplit(paths, labels), layouts, patches,
                          places=(image_of, np.asarray(corners), rows.labels))
    if isinstance(rows, MaskedFileSplit):
        split.with_masks(rows.rule, listed_annotations(rows, paths, layouts, patches))
    return split, np.arange(len(rows)), []


def grid_split(paths: list[str], patches) -> tuple[PatchSplit, dict[str, str]]:
    """Every foreground patch of a grid over `paths` (predict's input), and why each path without one has none."""
    unreadable: dict[str, str] = {}
    split, _, gone = _patch_split(FileSplit(paths, np.zeros(len(paths), np.int64)), patches, grid=True,
                                  unreadable=unreadable)
    return split, {**unreadable, **{layout.slide.path: why_none(layout, patches) for layout in gone}}


def _patch_split(images: FileSplit, patches, *, grid: bool, unreadable: dict[str, str] | None = None) \
        -> tuple[PatchSplit, np.ndarray, list[Layout]]:
    """`images` as patches, which have any (indices), those without; an unreadable one left out where `unreadable`."""
    layouts = layouts_of(images.paths, patches, grid=grid, unreadable=unreadable)
    read = [i for i, path in enumerate(images.paths) if unreadable is None or path not in unreadable]
    of = dict(zip(read, layouts, strict=True))
    masks = annotations_of(images, of, patches, unreadable) if isinstance(images, MaskedFileSplit) else None
    kept = np.array([i for i in read if of[i].valid.any() and (masks is None or i in masks)], dtype=np.int64)
    mode = GridPatches if grid else RandomPatches
    split = mode(FileSplit([images.paths[i] for i in kept], images.labels[kept]), [of[i] for i in kept], patches)
    if masks is not None:
        split.with_masks(images.rule, [masks[i] for i in kept])
    failed = set() if masks is None else {i for i in of if of[i].valid.any() and i not in masks}  # in `unreadable`
    have = set(kept.tolist()) | failed
    return split, kept, [of[i] for i in read if i not in have]

