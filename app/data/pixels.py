"""A run's pixels (app/data/decode.py's Pixels) from its config and data: data.channels, data.dtype, and for
`data.channels=all` the bands of the first training image, which every other image must have too."""

from __future__ import annotations

from app.data import tiff
from app.data.bands import run_bands
from app.data.decode import DecodeError, Pixels, TiffAt
from app.data.images import read_bytes, rgb_from_bytes
from app.errors import DataError


def run_pixels(data, split) -> Pixels:
    """A run's Pixels from data.channels and data.dtype; `all` counts the bands of `split`'s first image."""
    channels = data.channels if isinstance(data.channels, str) else tuple(int(c) for c in data.channels)
    found = first_bands(split) if channels == "all" else 0
    dtype = str(getattr(data.dtype, "value", data.dtype))
    return Pixels(channels=channels, bands=run_bands(channels, found), dtype=dtype)


def first_bands(split) -> int:
    """The bands of `split`'s first image: a TIFF's from its header, another file's decoded; 3 for arrays and copies."""
    paths = getattr(split, "paths", None)
    if not paths:
        return 3
    try:
        raw = read_bytes(paths[0], None)
        if isinstance(raw, TiffAt):
            return tiff.band_count(raw.path)
        image = rgb_from_bytes(raw, None, None)
        return 1 if image.ndim == 2 else image.shape[2]
    except (OSError, DecodeError) as error:
        raise DataError(f"{paths[0]} (the first training image) cannot be read to count its bands for "
                        f"data.channels=all: {error}. Fix or remove it, or list the bands, e.g. "
                        "data.channels=[0,1,2,3]") from None
