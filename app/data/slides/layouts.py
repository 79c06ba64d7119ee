"""Where an image's patches lie: the level read, the grid's corners at level 0, which have foreground; why none."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from app.data.pixels.decode import DecodeError
from app.data.slides.masks import (
    compute_mask,
    fractions,
    mask_cache_path,
    read_cached_mask,
    takes_glass,
    write_mask_to_cache,
)
from app.data.slides.regions import Slide, slide_of
from app.data.source import bad_sample_reason
from app.errors import DataError

STEPS_A_PATCH = 4  # random patches start on a grid this many times finer than a patch
MASK_CELLS = 8  # a patch's side spans this many cells of its image's mask
log = logging.getLogger(__name__)
PROGRESS_AFTER_S = 2  # a pass over the images shows its bar once it has taken this long
FINER = 1.001  # a resolution this close to a level's is that level (scanners round their µm a pixel)
MAX_OVERLAP = 16  # the grid's patches overlapping more (data.patches.stride) are warned of


@dataclass(frozen=True, kw_only=True)
class Layout:
    """One image's patches: level and region read, a patch's extent and corners at level 0, which have foreground."""

    slide: Slide
    level: int
    read: tuple[int, int]
    extent: tuple[int, int]
    tops: np.ndarray
    lefts: np.ndarray
    valid: np.ndarray  # np.packbits of len(tops) × len(lefts)
    foreground: float  # the image's share of foreground (1.0 where no mask is made)

    @property
    def fits(self) -> bool:
        return bool(len(self.tops) and len(self.lefts))

    def cells(self) -> np.ndarray:
        return np.flatnonzero(np.unpackbits(self.valid, count=len(self.tops) * len(self.lefts)))

    def corner(self, cell: int) -> tuple[int, int]:
        return int(self.tops[cell // len(self.lefts)]), int(self.lefts[cell % len(self.lefts)])

    def level_bytes(self) -> int:
        """The level read, decoded, in whole chunks (0 where no chunk is kept: not a TIFF, or OpenSlide's)."""
        slide = self.slide
        if not slide.tiff or slide.openslide:
            return 0
        (height, width), (chunk_h, chunk_w) = slide.levels[self.level], slide.chunk
        each = (slide.bands + (slide.alpha is not None)) * np.dtype(slide.dtype).itemsize
        return -(-height // chunk_h) * chunk_h * -(-width // chunk_w) * chunk_w * each

    def read_bytes(self, size: tuple[int, int]) -> int:
        """The most a patch of `size` holds as it is read: every chunk it can touch decoded, the region, the patch."""
        slide = self.slide
        each = (slide.bands + (slide.alpha is not None)) * np.dtype(slide.dtype).itemsize  # an alpha is decoded too
        chunk_h, chunk_w = slide.chunk
        chunks = (-(-self.read[0] // chunk_h) + 1) * (-(-self.read[1] // chunk_w) + 1) if slide.tiff else 1
        return each * (chunks * chunk_h * chunk_w + self.read[0] * self.read[1] + size[0] * size[1])


def layouts_of(paths: list[str], patches, *, grid: bool, unreadable: dict[str, str] | None = None) -> list[Layout]:
    """Each path's layout (a bar if slow); an unreadable file's DataError raised, or put in `unreadable`, path → why."""
    layouts = []
    for path in tqdm(paths, desc="foreground masks", unit="image", file=sys.stderr, delay=PROGRESS_AFTER_S,
                     leave=False, dynamic_ncols=True):
        try:
            layouts.append(layout_of(path, patches, grid=grid))
        except DataError as error:
            if unreadable is None:
                raise
            unreadable[path] = str(error)
    return layouts


def layout_of(path: str, patches, *, grid: bool, masked: bool = True) -> Layout:
    """Where `path`'s patches lie at the resolution `patches` asks; a DataError naming the file where it cannot."""
    try:
        return _layout(path, patches, grid=grid, masked=masked)
    except (DecodeError, OSError) as error:
        raise DataError(f"{path} cannot be read as patches: {bad_sample_reason(error)}") from error


def edge_check(patches):  # (path, (top, left) at level 0) → None, or ("x" or "y", why) where it passes the edge
    extents: dict[str, tuple] = {}

    def past_edge(path: str, corner: tuple[int, int]) -> tuple[str, str] | None:
        if path not in extents:
            try:
                layout = layout_of(path, patches, grid=True, masked=False)
                extents[path] = (layout.slide.levels[0], layout.extent)
            except DataError:
                extents[path] = None
        if extents[path] is None:
            return None
        ((height, width), (tall, wide)), (top, left) = extents[path], corner
        if top + tall <= height and left + wide <= width:
            return None
        why = (f"the patch at x={left}, y={top} passes the edge of {path}: a patch covers {wide}×{tall} pixels of "
               f"its {width}×{height} (data.columns.x and y are its top left corner at level 0)")
        return "x" if left + wide > width else "y", why
    return past_edge


def _layout(path: str, patches, *, grid: bool, masked: bool) -> Layout:
    slide = slide_of(path, patches.max_chunk_pixels, patches.reader.value)
    scale = _downsample(slide, patches)
    level = max((k for k in range(len(slide.levels)) if slide.downsample(k) <= scale * FINER), key=slide.downsample)
    size = np.array(patches.size)
    read = tuple(int(v) for v in np.round(size * scale / slide.downsample(level)).astype(int))
    extent = tuple(int(v) for v in np.round(size * scale).astype(int))
    step = extent if not grid else np.round(np.array(patches.stride or patches.size) * scale).astype(int)
    step = np.maximum(np.array(step) // (1 if grid else STEPS_A_PATCH), 1)
    tops, lefts = (np.arange(0, slide.levels[0][axis] - extent[axis] + 1, step[axis]) for axis in (0, 1))
    shares, share = np.ones((len(tops), len(lefts))), 1.0
    if masked and patches.min_foreground > 0 and len(tops) and len(lefts):
        mask, cell = foreground_of(slide, extent, patches.mask_bands)
        shares, share = fractions(mask, cell, extent, (tops, lefts)), float(mask.mean())
    valid = np.packbits((shares >= patches.min_foreground).reshape(-1))
    return Layout(slide=slide, level=level, read=read, extent=extent, tops=tops, lefts=lefts, valid=valid,
                  foreground=share)


def foreground_of(slide: Slide, extent: tuple[int, int], bands: list[int] | None) -> tuple[np.ndarray, float]:
    """`slide`'s foreground mask for patches of `extent` (level-0 pixels), and its cell's side at level 0: from the
    cache, else made and kept there for the next run."""
    downsample = min(extent) / MASK_CELLS
    cache = mask_cache_path(slide, downsample, bands)
    cached = read_cached_mask(cache, slide.path)
    mask, cell = cached or compute_mask(slide, downsample, bands)
    if cached is None:
        write_mask_to_cache(cache, mask, cell)
    return mask, cell


def _downsample(slide: Slide, patches) -> float:
    if patches.level is not None:
        if not 0 <= patches.level < len(slide.levels):
            raise DataError(f"data.patches.level={patches.level}: {slide.path} has levels 0 to {len(slide.levels) - 1}")
        return slide.downsample(patches.level)
    if patches.mpp is not None:
        if slide.mpp is None:
            raise DataError(f"data.patches.mpp={patches.mpp}: {slide.path} records no resolution (the TIFF's "
                            "XResolution and ResolutionUnit): give data.patches.level or data.patches.downsample")
        if patches.mpp < slide.mpp / FINER:
            raise DataError(f"data.patches.mpp={patches.mpp} is finer than {slide.path}'s level 0, at {slide.mpp:g} µm "
                            f"a pixel: give {slide.mpp:g} µm or more (patches are never read above the scan's own "
                            "resolution), or data.patches.level=0")
        return max(patches.mpp / slide.mpp, 1.0)
    return max(patches.downsample or 1.0, 1.0)


def why_none(layout: Layout, patches) -> str:
    """Why an image has no patch: smaller than one, or none with data.patches.min_foreground of foreground."""
    if not layout.fits:
        (height, width), (tall, wide) = layout.slide.levels[0], layout.extent
        return (f"its {width}×{height} pixels are fewer than a patch's {wide}×{tall} (data.patches.size="
                f"{list(patches.size)} at its resolution, in level-0 pixels): lower data.patches.size or read at a "
                "finer level (data.patches.level, downsample or mpp)")
    said = (f"no patch with data.patches.min_foreground={patches.min_foreground} of foreground (it has "
            f"{layout.foreground:.0%} in all)")
    if takes_glass(layout.slide.bands, patches.mask_bands):  # grey or pale tissue reads as glass under this rule
        said += (": its pixels were taken as glass (bright and nearly grey, or grey: the rule of a brightfield RGB "
                 "slide); where its tissue is grey or pale, set data.patches.mask_bands=[0,1,2] to split it by "
                 "brightness, or lower data.patches.min_foreground")
    else:
        said += ": lower it"
    return said + " (0 takes every patch; `python -m app preview` then shows where they lie), or check the image"


def warn_of_overlap(counts: dict, patches) -> None:
    """A warning, with the splits' counts, where data.patches.stride makes the grid read each pixel many times."""
    stride = patches.stride or patches.size
    overlap = (patches.size[0] / stride[0]) * (patches.size[1] / stride[1])
    if overlap > MAX_OVERLAP:
        log.warning("data.patches.stride=%s of a %s patch reads each pixel in up to %d patches of the grid: %s; "
                    "validation reads every one each epoch (a stride of the patch's size overlaps none)",
                    list(stride), list(patches.size), round(overlap),
                    ", ".join(f"{name} {figures['patches']:,} patches of {figures['images']} images"
                              for name, figures in counts.items()))
