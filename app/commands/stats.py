"""`python -m app stats` (config as for train): each band's mean, std, min, max and 1st/99th percentiles over the
training split as validation reads it, each file's no-data pixels left out; printed; stats.json for data.normalize."""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.augment import eval_transforms
from app.capacity.auto import loading_only
from app.commands import failure_carried
from app.config import conf_dir, load
from app.data.pixels.band_stats import BandTally, unblended
from app.data.pixels.pixels import run_pixels
from app.errors import DataError
from app.io import check_own_json, write_json_over_own
from app.loader.pipeline import build_loader
from app.loader.settings import Settings
from app.runs.rundata import checked_source
from app.schema import register

log = logging.getLogger("app.stats")
STATS_KEYS = ("split", "bands", "dtype")  # a stats.json of this command's: what an earlier one it may replace holds
register()


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
@failure_carried
def main(cfg: DictConfig) -> str:
    config = load(cfg)
    out = Path(HydraConfig.get().runtime.output_dir) / "stats.json"
    check_own_json(out, STATS_KEYS, "stats")  # before the pass, which may take long
    source = checked_source(config)
    pixels = run_pixels(config.data, source.train)
    nodata = [source.train.nodata(i) for i in range(len(source.train))]  # each file's own, from its header
    tally = BandTally(pixels.bands, pixels.dtype)
    transforms = eval_transforms(config.augment, config.data.image_size)
    if any(value is not None for value in nodata):
        transforms = unblended(transforms, config.data.image_size)
    with build_loader(config, {"train": (source.train, transforms)}, on_bad_sample="mark",
                      settings=Settings.of(config.data, loading_only(config.queue), pixels=pixels)) as loader:
        for x, _, positions in loader.readable("train"):
            tally.add(x, [nodata[p] for p in positions])
        failed = loader.failed("train")
    for index in sorted(failed):
        log.warning("left out: %s (%s)", source.train.describe(index), failed[index])
    if len(failed) == len(source.train):
        raise DataError(f"none of the {len(failed)} training images could be read: fix them, then run stats again.")
    bands = tally.figures()
    write_json_over_own(out, {"split": "train", "images": len(source.train) - len(failed), "unreadable": len(failed),
                     "dtype": pixels.dtype, "channels": pixels.channels if isinstance(pixels.channels, str)
                     else list(pixels.channels), "image_size": list(config.data.image_size),
                     "nodata": sorted({value for value in nodata if value is not None}),
                     "source": source.name, "fingerprint": source.fingerprint, "bands": bands}, "stats")
    print(_table(bands))
    print(f"\nwritten: {out}\ntrain with it: data.normalize.stats={out}")
    return str(out)


def _table(bands: list[dict]) -> str:
    head = f"{'band':>4} {'mean':>10} {'std':>10} {'min':>7} {'p1':>7} {'p99':>7} {'max':>7}"
    rows = [f"{i:>4} {b['mean']:>10.2f} {b['std']:>10.2f} {b['min']:>7} {b['p1']:>7} {b['p99']:>7} {b['max']:>7}"
            if b["pixels"] else f"{i:>4} (no pixels)" for i, b in enumerate(bands)]
    return "\n".join([head, *rows])
