"""Patches of large images as a split's samples, read region by region (app/data/regions.py): training draws
data.patches.per_image an image an epoch from (seed, epoch, index, draw) alone, or takes the grid, as validation,
evaluate and predict do; a patch short of data.patches.min_foreground is never a sample; the split is by image."""

from __future__ import annotations

import dataclasses
import logging

import cv2
import numpy as np

from app.data.bands import fit_bands
from app.data.decode import Decode, DecodeError
from app.data.layouts import Layout, layout_of, layouts_of, why_none
from app.data.regions import read_region
from app.data.source import FileSplit, Source, bad_sample_reason
from app.errors import BadSampleError, DataError

NAMED = 10  # images left out named in the log line, at most
MAX_OVERLAP = 16  # the grid's patches overlapping more (data.patches.stride) are warned of

log = logging.getLogger(__name__)


class PatchSplit:
    """Patch samples: a grid's foreground ones, `per_image` drawn an image an epoch (seed, epoch, draw), or listed."""

    def __init__(self, images: FileSplit, layouts: list[Layout], *, size: tuple[int, int], per_image: int | None):
        self.images, self.layouts, self.size, self.per_image = images, layouts, tuple(size), per_image
        if per_image is None:  # the grid
            cells = [layout.cells() for layout in layouts]
            self.image_of = np.repeat(np.arange(len(layouts)), [len(c) for c in cells]).astype(np.int32)
            self.cell_of = np.concatenate(cells).astype(np.int32) if cells else np.zeros(0, np.int32)
        else:
            self.image_of, self.cell_of = np.repeat(np.arange(len(layouts)), per_image).astype(np.int32), None
        self.labels, self.corners = images.labels[self.image_of], None
        self._cells: dict[int, np.ndarray] = {}

    @classmethod
    def listed(cls, images: FileSplit, layouts: list[Layout], size: tuple[int, int], rows: tuple) -> PatchSplit:
        """A table's own patches, `rows` (image a patch, its (top, left) at level 0, its label), in that order."""
        split = cls(images, layouts, size=size, per_image=1)
        split.image_of, split.corners, split.labels = rows
        return split

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_cells": {}}

    def __len__(self) -> int:
        return len(self.image_of)

    def where(self, i: int, drawn: tuple[int, int, int] | None = None) -> tuple[int, int, int]:
        """(image, top, left) of sample i, in level-0 pixels; a random patch's from `drawn` (seed, epoch, draw)."""
        image = int(self.image_of[i])
        layout = self.layouts[image]
        if self.corners is not None:
            return image, int(self.corners[i][0]), int(self.corners[i][1])
        if self.cell_of is not None:
            return (image, *layout.corner(int(self.cell_of[i])))
        if image not in self._cells:
            self._cells[image] = layout.cells()
        cells = self._cells[image]
        seed, epoch, draw = drawn or (0, 0, 0)
        return (image, *layout.corner(int(cells[np.random.default_rng([seed, epoch, i, draw]).integers(len(cells))])))

    def region_of(self, i: int, drawn: tuple[int, int, int] | None = None) -> tuple[Layout, tuple[int, int]]:
        """Sample i's image's layout and the region's (top, left) in the pixels of the level it is read at."""
        image, top, left = self.where(i, drawn)
        layout = self.layouts[image]
        scale, (height, width) = layout.slide.downsample(layout.level), layout.slide.levels[layout.level]
        return layout, (min(int(top / scale), height - layout.read[0]), min(int(left / scale), width - layout.read[1]))

    def fetch(self, i: int, decode: Decode | None = None, drawn: tuple[int, int, int] | None = None) -> np.ndarray:
        """Sample i's region, at the patch size: only the tiles it touches read; BadSampleError if unreadable."""
        layout, (y, x) = self.region_of(i, drawn)
        try:
            region = read_region(layout.slide, layout.level, (y, x), layout.read)
        except Exception as exc:
            raise BadSampleError(i, self.describe(i, drawn), bad_sample_reason(exc)) from exc
        if layout.read != self.size:  # between two levels: the finer one read, shrunk the rest of the way
            shrunk = cv2.resize(region, self.size[::-1], interpolation=cv2.INTER_AREA)
            region = shrunk if shrunk.ndim == 3 else shrunk[:, :, None]
        return region

    def decode(self, i: int, raw: np.ndarray, decode: Decode | None = None) -> np.ndarray:
        pixels = (decode or Decode()).pixels
        try:
            return fit_bands(raw, channels=pixels.channels, bands=pixels.bands, dtype=pixels.dtype)
        except DecodeError as exc:
            raise BadSampleError(i, self.describe(i), str(exc)) from exc

    def read(self, i: int, decode: Decode | None = None, drawn: tuple[int, int, int] | None = None) -> np.ndarray:
        return self.decode(i, self.fetch(i, decode, drawn), decode)

    def place_of(self, seed: int):
        """(index, epoch, draw) → "image:x:y", sample index's image (in this split) and corner: samples.csv's."""
        def place(i: int, epoch: int, draw: int) -> str:
            image, top, left = self.where(i, (seed, epoch, draw))
            return f"{image}:{left}:{top}"
        return place

    def largest_decode_bytes(self) -> int:
        """The most one patch holds as it is read: every chunk it can touch decoded, the region, and the patch."""
        return max((_patch_bytes(layout, self.size) for layout in self.layouts), default=0)

    def describe(self, i: int, drawn: tuple[int, int, int] | None = None) -> str:
        image, top, left = self.where(i, drawn)
        if self.cell_of is None and self.corners is None and drawn is None:
            return f"{self.images.paths[image]} (a random patch)"
        return f"{self.images.paths[image]} (the patch at x={left}, y={top})"


def _patch_bytes(layout: Layout, size: tuple[int, int]) -> int:
    slide = layout.slide
    each = (slide.bands + (slide.alpha is not None)) * np.dtype(slide.dtype).itemsize  # an alpha is decoded too
    chunk_h, chunk_w = slide.chunk
    chunks = (-(-layout.read[0] // chunk_h) + 1) * (-(-layout.read[1] // chunk_w) + 1) if slide.tiff else 1
    return each * (chunks * chunk_h * chunk_w + layout.read[0] * layout.read[1] + size[0] * size[1])


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
        source.train_weights[kept] if train.corners is not None else source.train_weights[kept][train.image_of]
    counts = {name: {"images": len(split.layouts), "patches": len(split)} for name, (split, _, _) in built.items()}
    _warn_of_overlap(counts, patches)
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


def _warn_of_overlap(counts: dict, patches) -> None:
    """A warning, with the splits' counts, where data.patches.stride makes the grid read each pixel many times."""
    stride = patches.stride or patches.size
    overlap = (patches.size[0] / stride[0]) * (patches.size[1] / stride[1])
    if overlap > MAX_OVERLAP:
        log.warning("data.patches.stride=%s of a %s patch reads each pixel in up to %d patches of the grid: %s; "
                    "validation reads every one each epoch (a stride of the patch's size overlaps none)",
                    list(stride), list(patches.size), round(overlap),
                    ", ".join(f"{name} {figures['patches']:,} patches of {figures['images']} images"
                              for name, figures in counts.items()))


def _listed_split(rows: FileSplit, corners: np.ndarray, patches) -> tuple[PatchSplit, np.ndarray, list[str]]:
    """A table's patches (data.columns.x, y) with their own labels; an image's label their most common."""
    paths = list(dict.fromkeys(rows.paths))
    at = {path: i for i, path in enumerate(paths)}
    image_of = np.array([at[path] for path in rows.paths], np.int32)
    layouts = [layout_of(path, patches, grid=True, masked=False) for path in paths]  # each row's edge: checked
    labels = np.array([np.bincount(rows.labels[image_of == image]).argmax() for image in range(len(paths))])
    split = PatchSplit.listed(FileSplit(paths, labels), layouts, tuple(patches.size),
                              (image_of, np.asarray(corners), rows.labels))
    return split, np.arange(len(rows)), []


def fixed_split(split: PatchSplit, patches, *, draws: int | None, seed: int) -> PatchSplit:
    """Training patches fixed once (prepare): a table's own, the grid, or up to `draws` distinct ones an image."""
    if split.corners is not None or split.cell_of is not None:
        return split
    if draws is None:
        return _patch_split(split.images, patches, grid=True)[0]
    image_of, corners = [], []
    for image, layout in enumerate(split.layouts):
        cells = layout.cells()
        picked = np.random.default_rng([seed, image]).choice(len(cells), min(draws, len(cells)), replace=False)
        image_of += [image] * len(picked)
        corners += [layout.corner(int(cells[k])) for k in np.sort(picked)]
    image_of = np.array(image_of, np.int32)
    return PatchSplit.listed(split.images, split.layouts, split.size,
                             (image_of, np.array(corners, np.int64).reshape(-1, 2), split.images.labels[image_of]))


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
    kept = np.array([i for i in read if of[i].valid.any()], dtype=np.int64)
    split = PatchSplit(FileSplit([images.paths[i] for i in kept], images.labels[kept]), [of[i] for i in kept],
                       size=tuple(patches.size), per_image=None if grid else patches.per_image)
    have = set(kept.tolist())
    return split, kept, [of[i] for i in read if i not in have]
