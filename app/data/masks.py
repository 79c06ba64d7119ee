"""Where a large image has something to learn from: a foreground mask at a low resolution (Otsu's threshold on the
saturation of an RGB image, on the mean of the bands otherwise; a GeoTIFF's no-data is background), read from the
pyramid level nearest below it, or streamed a row of chunks at a time from a file without one."""

from __future__ import annotations

import cv2
import numpy as np

from app.data.regions import Slide, read_region

FLAT = 8  # a value range (of 0..255) under this has no threshold
MIN_SATURATION = 8  # of 255: CLAM's fixed threshold; glass and blank slides stay below it


def thumbnail(slide: Slide, downsample: float) -> tuple[np.ndarray, float]:
    """`slide` shrunk about `downsample` times, (h, w, bands), and the downsample it has: every step-th pixel of the
    coarsest level at most that coarse, read a band of chunk rows at a time."""
    level = max((k for k in range(len(slide.levels)) if slide.downsample(k) <= downsample), default=0,
                key=slide.downsample)
    step = max(1, int(downsample / slide.downsample(level)))
    height, width = slide.levels[level]
    rows = -(-max(slide.chunk[0], step) // step) * step  # a band of whole chunks, a multiple of the step
    parts = [read_region(slide, level, (top, 0), (min(rows, height - top), width))[::step, ::step]
             for top in range(0, height, rows)]
    return np.concatenate(parts), slide.downsample(level) * step


def foreground(thumb: np.ndarray, *, bands: list[int] | None = None, nodata: float | None = None) -> np.ndarray:
    """True where `thumb` (h, w, bands) shows foreground, among the pixels that are not `nodata` in every band: an RGB
    image's saturation above Otsu's threshold and above MIN_SATURATION (glass is grey, however flat), else the mean
    of `bands` (all by default) above Otsu's threshold (all of it, where its values are flat)."""
    valid = ~np.all(thumb == nodata, axis=2) if nodata is not None else np.ones(thumb.shape[:2], bool)
    if not valid.any():
        return valid
    if bands is None and thumb.shape[2] == 3:
        rgb = thumb.astype(np.float32)
        top, bottom = rgb.max(axis=2), rgb.min(axis=2)
        saturation = np.where(top > 0, (top - bottom) / np.maximum(top, 1e-9), 0) * 255
        return valid & (saturation > max(_otsu(saturation, valid), MIN_SATURATION))
    value = (thumb if bands is None else thumb[:, :, bands]).astype(np.float32).mean(axis=2)
    low, high = np.percentile(value[valid], [1, 99])
    scaled = np.clip((value - low) * 255.0 / max(high - low, 1e-9), 0, 255)
    if high - low < FLAT * np.iinfo(thumb.dtype).max / 255:
        return valid
    return valid & (scaled > _otsu(scaled, valid))


def _otsu(values: np.ndarray, valid: np.ndarray) -> float:
    """Otsu's threshold (0..255) of `values` where `valid`; 0 where they are flat."""
    chosen = values[valid]
    if chosen.max() - chosen.min() < FLAT:
        return 0.0
    threshold, _ = cv2.threshold(chosen.astype(np.uint8).reshape(1, -1), 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    return float(threshold)


def fractions(mask: np.ndarray, scale: float, extent: tuple[int, int], corners: tuple[np.ndarray, np.ndarray]):
    """The foreground share of each patch of `extent` (level-0 pixels) at every (top, left) of `corners`' tops ×
    lefts, from `mask` of `scale` level-0 pixels a cell: (len(tops), len(lefts))."""
    tops, lefts = corners
    summed = cv2.integral(mask.astype(np.uint8), sdepth=cv2.CV_32S)
    y0 = np.clip(np.floor(tops / scale).astype(int), 0, mask.shape[0])
    y1 = np.clip(np.ceil((tops + extent[0]) / scale).astype(int), 0, mask.shape[0])
    x0 = np.clip(np.floor(lefts / scale).astype(int), 0, mask.shape[1])
    x1 = np.clip(np.ceil((lefts + extent[1]) / scale).astype(int), 0, mask.shape[1])
    total = summed[y1][:, x1] - summed[y0][:, x1] - summed[y1][:, x0] + summed[y0][:, x0]
    area = np.maximum(np.outer(y1 - y0, x1 - x0), 1)
    return total / area
