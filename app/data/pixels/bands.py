"""A decoded image made the run's pixels: bands by data.channels, samples of data.dtype. A 16-bit image in a uint8 run
is refused, never cut to 8 bits; one with fewer bands than the run reads is a bad sample naming both counts."""

from __future__ import annotations

import numpy as np

from app.data.pixels.decode import DecodeError

DTYPES = {"uint8": np.uint8, "uint16": np.uint16}


def fit_bands(image: np.ndarray, *, channels, bands: int, dtype: str) -> np.ndarray:
    """`image` (H, W) or (H, W, n) as the run's (H, W, `bands`) array of `dtype`, C-contiguous."""
    image = image if image.ndim == 3 else image[:, :, None]
    image = _samples(image, dtype)
    have = image.shape[2]
    if channels == "rgb":
        if have in (1, 2):  # grey, or grey and alpha: the grey in each of R, G and B
            return np.ascontiguousarray(np.repeat(image[:, :, :1], 3, axis=2))
        if have == 3:
            return image  # as decoded: the loader's every 8-bit photo, no copy
        if have == 4:  # RGB and alpha
            return np.ascontiguousarray(image[:, :, :3])
        raise DecodeError(f"it has {have} bands; data.channels=rgb reads 1, 3 or 4: set data.channels=all, or a list "
                          f"of band indices such as data.channels=[3,2,1]")
    if channels == "all":
        if have != bands:
            raise DecodeError(f"it has {have} bands where this run reads {bands} (data.channels=all, as most "
                              "training images have): every image of a run has the same bands")
        return np.ascontiguousarray(image)
    wanted = list(channels)
    if max(wanted) >= have:
        raise DecodeError(f"it has {have} bands; data.channels={wanted} reads band {max(wanted)} (bands count from 0)")
    return np.ascontiguousarray(image[:, :, wanted])


def _samples(image: np.ndarray, dtype: str) -> np.ndarray:
    """The image's samples as `dtype`: 8-bit widened for a uint16 run (values kept); 16-bit in a uint8 run refused."""
    if image.dtype == DTYPES[dtype]:
        return image
    if image.dtype == np.uint8 and dtype == "uint16":
        return image.astype(np.uint16)
    if image.dtype == np.uint16:
        raise DecodeError("it is a 16-bit image and this run reads uint8: set data.dtype=uint16 to train on its "
                          "16 bits (earlier versions scaled 16-bit grey to 8 bits; none are cut now)")
    raise DecodeError(f"its samples are {image.dtype}: data.dtype reads uint8 or uint16 images")

