"""Scanners' files (SVS, NDPI, MRXS, ...) through OpenSlide (the slides extra): regions as RGB on white, µm a pixel."""

from __future__ import annotations

import functools
import importlib.util
from collections import OrderedDict
from pathlib import Path

import numpy as np

from app.errors import DataError, install_command

# What OpenSlide reads beside a generic tiled TIFF (its vendors' suffixes): TIFFs, which tifffile reads too
TIFF_SCANNERS = (".svs", ".ndpi", ".scn", ".bif", ".svslide")
OTHER_SCANNERS = (".mrxs", ".vms", ".vmu")  # not TIFFs: OpenSlide alone
OPEN_FILES = 8  # as app/data/slides/regions.py keeps tifffile's


@functools.cache
def installed() -> bool:
    return importlib.util.find_spec("openslide") is not None


def through_openslide(path: str, reader: str) -> bool:
    """Whether OpenSlide reads `path` under data.patches.reader=`reader`; a DataError naming the extra if missing."""
    suffix = Path(path).suffix.lower()
    wanted = reader == "openslide" or (reader == "auto" and suffix in OTHER_SCANNERS)
    if wanted and not installed():
        why = "a scanner's format only it reads" if reader == "auto" else "data.patches.reader=openslide"
        raise DataError(f"{path} is read by OpenSlide ({why}), which is not installed: add the slides extra, "
                        f"{install_command('slides')} (openslide-bin and openslide-python: the library comes in the "
                        "wheel), or convert the file to a tiled pyramidal TIFF, e.g. `vips tiffsave in out.tif --tile "
                        "--pyramid --compression jpeg`.")
    return wanted or (reader == "auto" and suffix in TIFF_SCANNERS and installed())


class OpenSlides:
    """A worker's open OpenSlide handles, the least recently read closed past OPEN_FILES."""

    def __init__(self, size: int = OPEN_FILES):
        self.size, self.files = size, OrderedDict()

    def get(self, path: str):
        if path not in self.files:
            import openslide  # noqa: PLC0415 - an optional extra: only runs on scanners' files load it

            self.files[path] = openslide.OpenSlide(path)
            while len(self.files) > self.size:
                self.files.popitem(last=False)[1].close()
        self.files.move_to_end(path)
        return self.files[path]

    def close_all(self) -> None:
        while self.files:
            self.files.popitem()[1].close()


opened = OpenSlides()


def header(path: str) -> dict:
    """A slide's levels (height, width), its tile (level 0's, else 256²) and µm a pixel, from OpenSlide."""
    import openslide  # noqa: PLC0415 - an optional extra

    try:
        slide = opened.get(path)
    except openslide.OpenSlideError as error:
        raise DataError(f"{path} cannot be read by OpenSlide: {error}") from error
    props = slide.properties
    tile = (int(props.get("openslide.level[0].tile-height", 256)), int(props.get("openslide.level[0].tile-width", 256)))
    mpp = props.get(openslide.PROPERTY_NAME_MPP_X)
    return {"levels": tuple((h, w) for w, h in slide.level_dimensions), "chunk": tile,
            "mpp": float(mpp) if mpp else None}


def read_region(path: str, level: int, window: tuple, *, downsample: float) -> np.ndarray:
    """(height, width, 3) uint8 of `level`, `window` ((top, left), (height, width)) in its pixels: RGBA on white."""
    (top, left), (height, width) = window
    region = np.asarray(opened.get(path).read_region((round(left * downsample), round(top * downsample)), level,
                                                     (width, height)))
    return on_white(region, premultiplied=False)


def on_white(rgba: np.ndarray, *, premultiplied: bool) -> np.ndarray:  # a transparent part (outside a scan): glass
    white = float(np.iinfo(rgba.dtype).max)
    alpha = rgba[:, :, 3:4].astype(np.float32) / white
    rgb = rgba[:, :, :3] if premultiplied else rgba[:, :, :3] * alpha
    return np.ascontiguousarray((rgb + white * (1 - alpha) + 0.5).astype(rgba.dtype))
