"""`python -m app prepare data=<source> prepare.out=DIR`: a packed, pre-resized shard copy of the data."""

from __future__ import annotations

import logging

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.capacity.auto import loading_only
from app.commands import failure_carried
from app.config import conf_dir, load
from app.prepare.copy import write_prepared_copy
from app.schema import register

register()
log = logging.getLogger("app.prepare")


@hydra.main(config_path=str(conf_dir()), config_name="prepare", version_base="1.3")
@failure_carried
def main(cfg: DictConfig) -> str:
    config = load(cfg)
    workers = loading_only(config.queue).workers  # `auto`: every core, nothing else to balance
    line = write_prepared_copy(config, workers=workers, overrides=list(HydraConfig.get().overrides.task))
    log.info("%s", line)
    print(line)
    return line
