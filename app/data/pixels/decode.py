"""What decoding a file needs to know (`Decode`, `Pixels`) and how it fails (DecodeError), shared by every reader."""

from __future__ import annotations

from dataclasses import dataclass

# Pillow's own limit: images declaring more pixels are refused before they are decoded.
DEFAULT_MAX_PIXELS = 89_478_485


class DecodeError(ValueError):
    """A file that is not a readable image; the message is a short reason (no path)."""


@dataclass(frozen=True, kw_only=True)
class Pixels:
    """What a run's images are made (bands.py): data.channels, its band count, data.dtype, data.normalize."""

    channels: str | tuple[int, ...] = "rgb"
    bands: int = 3
    dtype: str = "uint8"
    mean: tuple[float, ...] | None = None  # data.normalize's, a band each; None: scaled by the type's largest value
    std: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Decode:
    """How a pipeline decodes: `min_short_side` allows JPEG drafts and a TIFF pyramid's lower levels (None: full size);
    images declaring more than `max_pixels` are refused (None: no limit); `pixels`: the run's bands and type."""

    min_short_side: int | None = None
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    pixels: Pixels = Pixels()


@dataclass(frozen=True)
class TiffAt:
    """A TIFF file, read by its decode (tifffile reads only the strips or tiles of the level it needs)."""

    path: str


def check_pixels(width: int, height: int, max_pixels: int | None) -> None:
    if max_pixels is not None and width * height > max_pixels:
        raise DecodeError(f"it declares {width}×{height} = {pixel_count(width * height)} pixels, above "
                          f"data.max_image_pixels={max_pixels} (a decompression bomb, or a scan too large: raise "
                          "data.max_image_pixels if the file is genuine)")


def pixel_count(pixels: int) -> str:
    """Millions from 100 M up; the exact count below, where a user's limit may be near (a 32×32 image is not "0 M")."""
    return f"{pixels / 1e6:.0f} M" if pixels >= 100_000_000 else f"{pixels:,}"
