"""Per-band figures of a split's pixels, batch by batch, for `python -m app stats`: mean and std (float64 sums), min,
max, and exact 1st and 99th percentiles from a histogram of every value; each GeoTIFF's own GDAL_NODATA left out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RESIZERS = frozenset({"Resize", "SmallestMaxSize", "LongestMaxSize"})
NEAREST = 0  # cv2.INTER_NEAREST: every pixel out is one pixel in


def unblended(transforms: Sequence[dict], image_size: Sequence[int]) -> list[dict]:
    """`transforms`, then the resize to `image_size`, all nearest: a linear one blends no-data into valid values."""
    height, width = (int(s) for s in image_size)
    nearest = [{**t, "interpolation": NEAREST} if str(t["_target_"]).rsplit(".", 1)[-1] in RESIZERS else dict(t)
               for t in transforms]
    return [*nearest, {"_target_": "albumentations.Resize", "height": height, "width": width,
                       "interpolation": NEAREST}]


class BandTally:
    """The running figures of `bands` bands of `dtype` (uint8 or uint16), each image's own no-data value left out."""

    def __init__(self, bands: int, dtype: str):
        self.levels = int(np.iinfo(dtype).max) + 1
        self.histogram = np.zeros((bands, self.levels), np.int64)
        self.images = 0

    def add(self, batch: np.ndarray, nodata: Sequence[float | None]) -> None:
        """A batch (N, H, W, bands) of the split's pixels, and each image's no-data value (None: none)."""
        self.images += len(batch)
        for band in range(self.histogram.shape[0]):
            self.histogram[band] += np.bincount(batch[..., band].ravel(), minlength=self.levels)
        for image, value in zip(batch, nodata, strict=True):
            if value is not None:  # one a pixel can hold (app/data/pixels/tiff.py's held_nodata)
                self.histogram[:, int(value)] -= np.count_nonzero(image == int(value), axis=(0, 1))

    def figures(self) -> list[dict]:
        """A dict a band: mean, std, min, max, p1, p99 and the pixels counted."""
        values = np.arange(self.levels, dtype=np.float64)
        return [_band(row, values) for row in self.histogram]


def _band(counts: np.ndarray, values: np.ndarray) -> dict:
    total = int(counts.sum())
    if not total:
        return {"pixels": 0, "mean": None, "std": None, "min": None, "max": None, "p1": None, "p99": None}
    mean = float(counts @ values / total)
    std = float(np.sqrt(max(counts @ (values - mean) ** 2 / total, 0.0)))
    present = np.flatnonzero(counts)
    cumulative = np.cumsum(counts)
    return {"pixels": total, "mean": mean, "std": std, "min": int(present[0]), "max": int(present[-1]),
            "p1": _percentile(cumulative, 0.01), "p99": _percentile(cumulative, 0.99)}


def _percentile(cumulative: np.ndarray, q: float) -> int:
    """The lowest value at or below which a share `q` of the pixels lie (numpy's `inverted_cdf`)."""
    return int(np.searchsorted(cumulative, q * cumulative[-1], side="left"))
