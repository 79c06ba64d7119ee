"""`python -m app train [overrides] [-m]`."""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.config import conf_dir, register

register()


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    """Returns the final validation accuracy, the value a Hydra sweeper optimises."""
    from app.train import run

    hydra_cfg = HydraConfig.get()
    summary = run(cfg, Path(hydra_cfg.runtime.output_dir), list(hydra_cfg.overrides.task))
    return summary["val_accuracy"]
