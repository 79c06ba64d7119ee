"""`python -m app preview`: preview.png, a row for each of `preview.images` training samples: the
source image (the resize alone), then `preview.augmentations` augmentations of it, each exactly
what the training loader would make of that sample in epochs 1, 2, ... (the same seed gives the
same picture; data.decode.draft is honoured, so a reduced decode shows as it trains).
The config is train's. No TensorFlow, no worker processes.
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.config import conf_dir, load
from app.schema import register

log = logging.getLogger("app.preview")
register()


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> str:
    from app.augment import augmenters
    from app.data import load_source
    from app.loader.order import epoch_order
    from app.loader.worker import make_sample
    from app.sheets import grid

    config = load(cfg)
    source = load_source(config.data)
    built = augmenters(config.data, {"source": [], "train": config.augment.transforms})
    n, k = config.preview.images, config.preview.augmentations
    indices = epoch_order(len(source.train), seed=config.seed, epoch=0, shuffle=config.queue.shuffle)[:n]
    images, captions = [], []
    for index in (int(i) for i in indices):
        name = source.class_names[int(source.train.labels[index])]
        images.append(make_sample(source.train, built["source"], index, config.seed, 0))
        captions.append(f"#{index} {name}")
        for epoch in range(k):
            images.append(make_sample(source.train, built["train"], index, config.seed, epoch))
            captions.append(f"epoch {epoch + 1}")
    out = Path(HydraConfig.get().runtime.output_dir) / "preview.png"
    grid(images, captions, columns=k + 1).save(out)
    log.info("preview: %d samples × (source + %d augmentations), seed %d", len(indices), k, config.seed)
    print(f"written: {out}")
    return str(out)
