"""A large image's foreground mask at a low resolution (RGB: not glass; one band, mask_bands: the side of Otsu's split
not around it; other bands: valid data, not no-data), from the pyramid level nearest below it, or streamed."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import zipfile
from pathlib import Path

import cv2
import numpy as np

from app.data.slides.regions import Slide, read_region
from app.data.source import bad_sample_reason
from app.io import app_cache_dir, atomic_write

log = logging.getLogger(__name__)

FLAT = 8  # a value range (of 0..255) under this has no threshold
MIN_SATURATION = 8  # of 255 (CLAM's): grey, however dark (a pen's mark, a scanner's border), is not tissue
# Glass is what a slide's own histogram cannot tell: a split of it parts nuclei from stroma where tissue fills the
# slide. Glass is bright and nearly grey, even with a scanner's colour cast; the palest eosin is more saturated.
GLASS_SATURATION = 38  # of 255 (0.15)
GLASS_BRIGHTNESS = 0.8  # of the slide's white: its 99th percentile of brightness (a 12-bit scan's white is not 65,535)
RULE = 4  # in a cached mask's key: a mask made by an earlier rule (Otsu's brighter side always) is made again


def thumbnail(slide: Slide, downsample: float) -> tuple[np.ndarray, float]:
    """`slide` about `downsample` times smaller, and that downsample: every step-th pixel of a level, in chunk rows."""
    level = max((k for k in range(len(slide.levels)) if slide.downsample(k) <= downsample), default=0,
                key=slide.downsample)
    step = max(1, int(downsample / slide.downsample(level)))
    height, width = slide.levels[level]
    rows = -(-max(slide.chunk[0], step) // step) * step  # a band of whole chunks, a multiple of the step
    # each band's every step-th pixel copied: a view would keep the whole band, and so the whole level, alive
    parts = [read_region(slide, level, (top, 0), (min(rows, height - top), width))[::step, ::step].copy()
             for top in range(0, height, rows)]
    return np.concatenate(parts), slide.downsample(level) * step


def foreground(thumb: np.ndarray, *, bands: list[int] | None = None, nodata: float | None = None) -> np.ndarray:
    """Where `thumb` (h, w, bands) shows foreground among its valid pixels: RGB's `tissue`, Otsu's side, or all."""
    valid = ~np.all(thumb == nodata, axis=2) if nodata is not None else np.ones(thumb.shape[:2], bool)
    if not valid.any():
        return valid
    if takes_glass(thumb.shape[2], bands):
        return valid & tissue(thumb, valid)
    if bands is None and thumb.shape[2] > 1:  # a scene's bands: a split of their mean would halve the valid data
        return valid
    value = (thumb if bands is None else thumb[:, :, bands]).astype(np.float32).mean(axis=2)
    low, high = np.percentile(value[valid], [1, 99])
    scaled = np.clip((value - low) * 255.0 / max(high - low, 1e-9), 0, 255)
    if high - low < FLAT * np.iinfo(thumb.dtype).max / 255:
        return valid
    bright = scaled > _otsu(scaled, valid)
    return valid & (~bright if _background_is(bright, valid) else bright)


def _background_is(side: np.ndarray, valid: np.ndarray) -> bool:
    """Whether `side` of Otsu's split is background: most of the valid border (glass, black), else the larger."""
    edge = np.zeros_like(valid)
    edge[[0, -1], :] = edge[:, [0, -1]] = True
    edge &= valid
    return bool(side[edge].mean() > 0.5) if edge.any() else bool(side[valid].mean() > 0.5)


def takes_glass(bands: int, mask_bands: list[int] | None) -> bool:
    """Whether an image of `bands` bands is masked by `tissue`'s brightfield rule (RGB, no `mask_bands` given)."""
    return mask_bands is None and bands == 3


def tissue(rgb: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """True where `rgb` is neither glass (bright, under GLASS_SATURATION) nor grey (under MIN_SATURATION)."""
    rgb = rgb.astype(np.float32)  # HSV's saturation and value; the value against the slide's own white
    top, bottom = rgb.max(axis=2), rgb.min(axis=2)
    saturation = np.where(top > 0, (top - bottom) / np.maximum(top, 1e-9), 0) * 255
    white = max(float(np.percentile(top[valid], 99)), 1e-9)
    glass = (top >= GLASS_BRIGHTNESS * white) & (saturation <= GLASS_SATURATION)
    return (saturation > MIN_SATURATION) & ~glass


def _otsu(values: np.ndarray, valid: np.ndarray) -> float:
    """Otsu's threshold (0..255) of `values` where `valid`; 0 where they are flat."""
    chosen = values[valid]
    if chosen.max() - chosen.min() < FLAT:
        return 0.0
    threshold, _ = cv2.threshold(chosen.astype(np.uint8).reshape(1, -1), 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    return float(threshold)


def fractions(mask: np.ndarray, scale: float, extent: tuple[int, int], corners: tuple[np.ndarray, np.ndarray]):
    """The foreground share of each patch of `extent` at `corners`' tops × lefts, from `mask` of `scale` a cell."""
    tops, lefts = corners
    summed = cv2.integral(mask.astype(np.uint8), sdepth=cv2.CV_32S)
    y0 = np.clip(np.floor(tops / scale).astype(int), 0, mask.shape[0])
    y1 = np.clip(np.ceil((tops + extent[0]) / scale).astype(int), 0, mask.shape[0])
    x0 = np.clip(np.floor(lefts / scale).astype(int), 0, mask.shape[1])
    x1 = np.clip(np.ceil((lefts + extent[1]) / scale).astype(int), 0, mask.shape[1])
    total = summed[y1][:, x1] - summed[y0][:, x1] - summed[y1][:, x0] + summed[y0][:, x0]
    area = np.maximum(np.outer(y1 - y0, x1 - x0), 1)
    return total / area


def mask_cache_path(slide: Slide, downsample: float, bands: list[int] | None) -> Path:
    """Where `slide`'s mask about `downsample` times smaller is cached, keyed by the file's size and mtime."""
    stat = os.stat(slide.path)
    key = hashlib.sha256(repr((os.path.abspath(slide.path), stat.st_size, stat.st_mtime_ns, round(downsample, 3),
                               bands, slide.nodata, RULE)).encode()).hexdigest()[:24]
    return app_cache_dir() / "masks" / f"{key}.npz"


def read_cached_mask(path: Path, image: str) -> tuple[np.ndarray, float] | None:  # None: none there, or damaged
    try:
        with np.load(path) as stored:
            return stored["mask"], float(stored["cell"])
    except (FileNotFoundError, NotADirectoryError):  # not cached, or no cache folder to hold it
        return None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:  # cut short, or not a mask
        log.info("the cached mask of %s is damaged (%s): made again", image, bad_sample_reason(error))
        return None


def compute_mask(slide: Slide, downsample: float, bands: list[int] | None) -> tuple[np.ndarray, float]:
    # `slide`'s mask about `downsample` times smaller and its cell in level-0 pixels, from its pixels: nothing written
    thumb, cell = thumbnail(slide, downsample)
    return foreground(thumb, bands=bands, nodata=slide.nodata), cell


def write_mask_to_cache(path: Path, mask: np.ndarray, cell: float) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, "wb") as file:
            np.savez(file, mask=mask, cell=cell)
    except OSError as error:  # the cache's fault, not the slide's: the mask stands, made again next run
        _warn_of_unwritable_cache(str(path.parent), bad_sample_reason(error))


@functools.cache  # once a folder
def _warn_of_unwritable_cache(folder: str, why: str) -> None:
    log.warning("the mask cache %s cannot be written (%s): each slide's mask is made again on every run; set "
                "APP_CACHE_DIR to a folder this user can write to keep them", folder, why)
