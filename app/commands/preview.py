"""`python -m app preview`: preview.png, a row for each of `preview.images` training samples: the source image, then
`preview.augmentations` augmentations as the training loader makes them in epochs 1, 2, ... (conf/preview.yaml)."""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.augment import augmenters
from app.commands import failure_carried
from app.config import conf_dir, load
from app.data.pixels.pixels import run_pixels
from app.data.slides.patches import PatchSplit
from app.data.sources import label_sets
from app.errors import BadSampleError, DataError
from app.inference.patch_scores import write_patch_sheet
from app.io import write_picture
from app.loader.order import epoch_order
from app.loader.worker import make_sample
from app.runs.rundata import checked_source
from app.schema import register
from app.sheets import class_colours, grid, overlay, rgb_view, with_legend

log = logging.getLogger("app.preview")
register()


@hydra.main(config_path=str(conf_dir()), config_name="preview", version_base="1.3")
@failure_carried
def main(cfg: DictConfig) -> str:
    config = load(cfg)
    source = checked_source(config)
    pixels = run_pixels(config.data, source.train)
    masks = source.train.mask_dtype is not None  # (image, mask) pairs: the mask laid over each
    built = augmenters(config.data, {"source": [], "train": config.augment.transforms}, pixels=pixels, masks=masks)
    n, k = config.preview.images, config.preview.augmentations
    order = epoch_order(len(source.train), seed=config.seed, epoch=0, shuffle=config.queue.shuffle)
    images, captions, shown = [], [], 0
    for index in (int(i) for i in order):
        if shown == n:
            break
        try:
            row = [make_sample(source.train, built["source"], index, seed=config.seed, epoch=0)]
        except BadSampleError as bad:
            _bad_sample(bad, config.data.on_bad_sample.value)
            continue
        row += [make_sample(source.train, built["train"], index, seed=config.seed, epoch=epoch) for epoch in range(k)]
        images += row
        named = "" if masks else f" {label_sets.text(source.train.labels[index], source.class_names)}"
        captions += [f"#{index}{named}", *(f"epoch {epoch + 1}" for epoch in range(k))]
        shown += 1
    if not shown:
        raise DataError(f"none of the {len(order)} samples of the train split could be read (the warnings above name "
                        "each): fix or replace the files in data.path.")
    out = Path(HydraConfig.get().runtime.output_dir) / "preview.png"
    bands = None if config.preview.bands is None else list(config.preview.bands)
    if bands is not None or pixels.bands != 3 or pixels.dtype != "uint8":
        log.info("preview: bands %s as red, green and blue, each image's stretched from its 2nd to its 98th "
                 "percentile (preview.bands)", bands or ([0, 1, 2] if pixels.bands >= 3 else [0, 0, 0]))
    write_picture(out, _sheet(images, captions, (bands, k + 1), source.class_names if masks else None).save)
    log.info("preview: %d samples × (source + %d augmentations), seed %d", shown, k, config.seed)
    print(f"written: {out}")
    if isinstance(source.train, PatchSplit):  # patches of images at hand: where they lie on them
        sheet = out.with_name("patches.png")
        write_patch_sheet(source.train, [int(i) for i in order[:n]], config.seed, sheet)
        print(f"written: {sheet} (where patches are drawn from in green, the previewed ones in yellow)")
    return str(out)


def _sheet(samples: list, captions: list[str], how: tuple, class_names: list[str] | None):
    """The grid of samples, `how` (bands, columns); pairs (class_names given) with their masks laid over, a legend."""
    (bands, columns), pairs = how, class_names is not None
    seen = list(rgb_view(np.stack([s[0] if pairs else s for s in samples]), bands))
    if not pairs:
        return grid(seen, captions, columns=columns)
    colours = class_colours(len(class_names))
    laid = [overlay(image, mask, colours) for image, (_, mask) in zip(seen, samples, strict=True)]
    return with_legend(grid(laid, captions, columns=columns), class_names, colours)


def _bad_sample(bad: BadSampleError, policy: str) -> None:
    """An unreadable sample by data.on_bad_sample: `raise` is a DataError naming it; else a warning and the next."""
    if policy == "raise":
        raise DataError(f"{bad}. Fix or remove the file, or set data.on_bad_sample=skip to leave such files out "
                        "(training then lists them in bad_samples.txt).") from None
    log.warning("left out of the preview: %s", bad)
