"""A training run opened again, for `evaluate` and `predict`: its config, its data, a model."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app import checkpoint
from app.config import to_plain, validate
from app.errors import ConfigError
from app.resume import resumed_config

log = logging.getLogger(__name__)


def open_run(cfg: DictConfig, safe: tuple[str, ...]) -> tuple[Path, DictConfig, dict]:
    """(run dir, its config with the `safe` overrides, that config as plain containers)."""
    run_dir = Path(cfg.resume)
    cfg = resumed_config(checkpoint.saved_config(run_dir), cfg, list(HydraConfig.get().overrides.task), safe)
    cfg = validate(cfg)
    return run_dir, cfg, to_plain(cfg)


def last_epoch_checkpoint(run_dir: Path):
    """The newest checkpoint written at an epoch's end (its weights made metrics.csv's last row)."""
    import keras

    for path in checkpoint.newest(run_dir):
        try:
            if json.loads((path / "state.json").read_text())["epoch_complete"]:
                return path, keras.saving.load_model(path / "model.keras")
        except Exception as error:  # noqa: BLE001 - an unreadable checkpoint is passed over
            log.warning("checkpoint %s cannot be loaded (%s); trying the one before it", path, error)
    raise ConfigError(f"config key `resume` = {str(run_dir)!r} is not allowed: it has no loadable checkpoint "
                      "written at an epoch's end.")
