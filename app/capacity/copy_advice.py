"""What a prepared copy would do for a run that waits on its loader with a worker on every core: the `prepare` that
makes one of this run's data at its size, the `train` on it, and the pace the probe's arithmetic predicts from a few
of the run's samples stored as prepare stores them, timed as a worker builds them from the copy (once, when asked)."""

from __future__ import annotations

import hashlib
import logging
import shlex
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

from app.augment import augmenters
from app.data.pixels.bands import fit_bands
from app.data.pixels.images import rgb_from_bytes
from app.errors import BadSampleError, ConfigError
from app.prepare.encode import Encoding, encode_sample
from app.prepare.rule import needed_short_side
from app.schema import PrepareConfig
from app.schema.data import PreparedDataConfig

log = logging.getLogger("app.train")
TIMED = 8  # samples built from the copy
# what a copy is made of: the source, its split's seed, the crops it must hold (an experiment's or a debug mode's too)
KEPT = ("data", "seed", "augment", "experiment", "debug")
# the copy's own (its folder, its splits), or given as the run has them, whatever set them
NOT_ON_A_COPY = {"path", "val_fraction", "_target_", "image_size", "batch_size"}
REFUSED_ON_A_COPY = {"data.sampling=weights"}  # a table's weight column: a copy keeps no weights


def commands(overrides: list[str], data, *, full: bool) -> tuple[str, str]:
    """(the `prepare` of this run's data, the `train` on the copy) of its overrides and data group; `full`: whole."""
    # full: the crops cannot tell the short side a copy needs, so it keeps each image whole
    keys = [(o, o.lstrip("+~").split("=", 1)[0]) for o in overrides]
    made_of = [o for o, key in keys if key.split(".")[0] in KEPT] + (["prepare.short_side=full"] if full else [])
    copy_keys = {f.name for f in fields(PreparedDataConfig)} - NOT_ON_A_COPY
    on_copy = [o for o, key in keys if o not in REFUSED_ON_A_COPY and (
        key.split(".")[0] not in ("data", "resume", "hydra") or (key.startswith("data.") and key.split(".")[1] in
                                                                 copy_keys))]
    out = shlex.quote(str(copy_folder(data, made_of)))
    (height, width), batch = data.image_size, data.batch_size
    return (" ".join(["python -m app prepare", *map(shlex.quote, made_of), f"prepare.out={out}"]),
            " ".join(["python -m app train", "data=prepared", f"data.path={out}", *map(shlex.quote, on_copy),
                      f"'data.image_size=[{height},{width}]'", f"data.batch_size={batch}"]))


def copy_folder(data, made_of: list[str]) -> Path:
    """Where the advice puts the copy: datasets/prepared-<the source's name>-<H>x<W>-<what it is made of, hashed>."""
    name = Path(str(data.path)).name if data.path else str(data._target_).rsplit(".", 1)[-1].removesuffix("_source")
    made = hashlib.sha256(" ".join(made_of).encode()).hexdigest()[:6]
    return Path.cwd() / "datasets" / f"prepared-{name}-{data.image_size[0]}x{data.image_size[1]}-{made}"


def short_side(augment, data) -> int | None:  # prepare.short_side=auto's for these crops; None where they cannot tell
    try:
        return needed_short_side(augment, data)[0]
    except ConfigError:
        return None


def seconds_from_copy(split, augmenter, *, short_side: int | None, seed: int) -> float | None:
    """A sample's seconds as a worker builds it from a JPEG copy of `split` at `short_side`; None: none readable."""
    decode = augmenter.decode
    encoding = Encoding(short_side=short_side, format="jpeg", quality=PrepareConfig().quality,
                        max_pixels=decode.max_pixels, pixels=decode.pixels)
    times = []
    for index in range(min(len(split), 4 * TIMED)):
        try:
            member = encode_sample(split, index, encoding).image  # as prepare stores it
        except BadSampleError:
            continue
        started = time.perf_counter()
        image = fit_bands(rgb_from_bytes(member, decode.min_short_side, decode.max_pixels), channels="rgb",
                          bands=3, dtype="uint8")
        augmenter(image, seed, 0, index, 0)
        times.append(time.perf_counter() - started)
        if len(times) == TIMED:
            break
    return float(np.mean(times)) if times else None


class CopyAdvice:
    """A run's diagnosis's `cure(row, workers)` (app/capacity/diagnosis.py): the commands, the copy's pace, once."""

    def __init__(self, config, split, *, pixels, overrides: list[str], batch_size: int):
        # a run's: its data, augment and seed groups, its command line's `overrides`; made when first asked
        self.data, self.augment, self.seed, self.split = config.data, config.augment, config.seed, split
        self.pixels, self.overrides, self.batch_size = pixels, overrides, batch_size
        self._made: tuple[str, str, float | None] | None = None

    def __call__(self, row: dict, workers: int) -> str:
        if self._made is None:
            side = short_side(self.augment, self.data)
            self._made = (*commands(self.overrides, self.data, full=side is None), self._timed(side))
        return advice(row, workers, self.batch_size, self._made)

    def _timed(self, side: int | None) -> float | None:
        if self.pixels.dtype != "uint8" or self.pixels.bands != 3:  # such a copy is raw: nothing decoded
            return None
        name = "a prepared copy's timing"
        augmenter = augmenters(self.data, {name: self.augment.transforms}, pixels=self.pixels)[name]
        try:
            return seconds_from_copy(self.split, augmenter, short_side=side, seed=self.seed)
        except Exception as error:  # noqa: BLE001 - advice: never the reason a run stops
            log.info("a prepared copy's sample could not be timed: %s", error)
            return None


def advice(row: dict, workers: int, batch_size: int, prepared: tuple[str, str, float | None]) -> str:
    """The copy's commands and its pace: a batch's samples over `workers` against the step as this epoch had it."""
    prepare, train, sample_s = prepared
    text = f"a prepared copy: `{prepare}`, then `{train}`"
    if sample_s is None or not row.get("images_per_s"):
        return text + " (not timed: such a copy is not JPEG, or none of the samples could be read)"
    step_s = batch_size / row["images_per_s"] * (1 - row["data_wait_fraction"])
    cycle = max(step_s, batch_size * sample_s / max(workers, 1))
    return (text + f" (a sample built from it here: {1e3 * sample_s:.1f} ms; predicted {batch_size / cycle:.0f} "
            f"images/s with the step waiting {100 * (1 - step_s / cycle):.0f} % of the time, against "
            f"{row['images_per_s']:.0f} and {100 * row['data_wait_fraction']:.0f} % now)")
