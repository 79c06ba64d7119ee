"""A run's Pixels from config and data; `data.channels=all`: the bands most training images have, which all must."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

from app.data.pixels import tiff
from app.data.pixels.decode import DecodeError, Pixels, TiffAt
from app.data.pixels.images import read_bytes, rgb_from_bytes
from app.errors import DataError, config_error
from app.io import read_regular

log = logging.getLogger(__name__)


def run_pixels(data, split) -> Pixels:
    """A run's Pixels from its config; `all` counts the bands of `split`'s images (most have)."""
    return pixels_of(data.channels, data.dtype, split=split, normalize=data.normalize)


def pixels_of(channels, dtype, *, split=None, normalize=None, bands: int | None = None) -> Pixels:
    """Pixels of `channels` and `dtype`: `bands` where known (a model's input), else as `channels` gives them."""
    channels = channels if isinstance(channels, str) else tuple(int(c) for c in channels)
    if bands is None:
        bands = 3 if channels == "rgb" else common_bands(split) if channels == "all" else len(channels)
    dtype = str(getattr(dtype, "value", dtype))
    read = (_indices(channels, bands), dtype)
    mean, std = (None, None) if normalize is None else normalization(normalize, bands, read=read)
    return Pixels(channels=channels, bands=bands, dtype=dtype, mean=mean, std=std)


def normalization(normalize, bands: int, read: tuple = ()) -> tuple[tuple | None, tuple | None]:
    """(mean, std) a band from data.normalize: its own lists, or a stats.json's; (None, None) where none is given."""
    mean, std, key = normalize.mean, normalize.std, "data.normalize.mean"
    if normalize.stats:
        mean, std, key = *stats_of(normalize.stats, read), "data.normalize.stats"
    if mean is None and std is None:
        return None, None
    if mean is None or std is None:
        raise config_error("data.normalize.std" if std is None else key, None, "a list beside data.normalize's "
                           "other one (mean and std, a value a band), or both null")
    if len(mean) != bands or len(std) != bands:
        raise config_error(key, list(mean), f"{bands} means and {bands} std above 0, one a band this run reads "
                           f"(std: {list(std)})")
    flat = [band for band, s in enumerate(std) if s <= 0]
    if flat:
        raise config_error(key, list(std), f"a std above 0 for every band: band {flat[0]} (from 0) has std "
                           f"{std[flat[0]]}, a band of one value ({mean[flat[0]]}) that tells no image from another. "
                           "Leave it out with data.channels (a list of the other bands' indices), or set "
                           "data.normalize's mean and std by hand")
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)


def stats_of(path: str, read: tuple = ()) -> tuple[list[float], list[float]]:
    """(mean, std) a band of a stats.json, refused where it records other (channels, dtype) than `read`."""
    try:
        made = json.loads(read_regular(Path(path).expanduser()))  # a pipe never waited on
        bands = made["bands"]
        figures = [float(b["mean"]) for b in bands], [float(b["std"]) for b in bands]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise config_error("data.normalize.stats", path,
                           f"a stats.json that `python -m app stats` wrote ({error})") from None
    if read:
        _check_made_for(path, made, *read)
    return figures


def _check_made_for(path: str, made: dict, channels, dtype: str) -> None:
    """A stats.json's recorded data.channels and data.dtype against the run's: another band's figures are refused."""
    run = (channels, dtype)
    recorded = (_indices(made.get("channels", channels), len(made["bands"])), made.get("dtype", dtype))  # older: none
    if recorded != run:
        raise config_error("data.normalize.stats", path, f"the figures of this run's bands: it was made for "
                           f"data.channels={_listed(recorded[0])} data.dtype={recorded[1]}, and this run reads "
                           f"data.channels={_listed(run[0])} data.dtype={run[1]}. Run `python -m app stats` with "
                           "this run's data.channels and data.dtype, and give its stats.json")


def _indices(channels, bands: int):
    """data.channels as the bands it reads: `all` as their indices (the same bands as the list of them), rgb as is."""
    return list(range(bands)) if channels == "all" else channels if isinstance(channels, str) else list(channels)


def _listed(channels) -> str:
    return channels if isinstance(channels, str) else f"[{','.join(str(c) for c in channels)}]"


def common_bands(split, sampled: int = 16) -> int:
    """The bands most of `sampled` images spread over `split` have (a tie: the first's): an odd file is the bad one."""
    if isinstance(split.bands, int):
        return split.bands  # a prepared copy's, from its manifest
    paths = split.files()
    if not paths:
        return 3
    counts, errors = {}, {}
    for path in paths[:: max(1, len(paths) // sampled)][:sampled]:
        try:
            counts[path] = _bands_of(path)
        except (OSError, DecodeError) as error:
            errors[path] = error
    if not counts:
        path, error = next(iter(errors.items()))
        raise DataError(f"{path} (a training image) cannot be read to count its bands for data.channels=all: {error}. "
                        "Fix or remove it, or list the bands, e.g. data.channels=[0,1,2,3]") from None
    bands = Counter(counts.values()).most_common(1)[0][0]
    odd = [f"{path} ({n})" for path, n in counts.items() if n != bands]
    if odd:
        log.warning("data.channels=all reads %d bands, as %d of the %d images counted have; other counts: %s",
                    bands, len(counts) - len(odd), len(counts), ", ".join(odd))
    return bands


def _bands_of(path) -> int:
    raw = read_bytes(path, None)
    if isinstance(raw, TiffAt):
        return tiff.band_count(raw.path)
    image = rgb_from_bytes(raw, None, None)
    return 1 if image.ndim == 2 else image.shape[2]
