"""Hydra's saved config files (.hydra/*.yaml, multirun.yaml) redacted by `RedactSecrets` at on_job_start, first hook."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from app.io import atomic_write
from app.redact import redacted

# the files Hydra writes into a job's output_subdir (hydra/core/utils.py run_job)
JOB_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")
SWEEP_FILE = "multirun.yaml"  # the sweeper's, in the sweep's folder


class RedactSecrets(Callback):
    """Rewrites Hydra's files of a job (and its sweep's multirun.yaml) redacted, as soon as Hydra has written them."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        subdir = config.hydra.output_subdir
        if subdir is not None:
            folder = Path(config.hydra.runtime.output_dir) / str(subdir)
            for name in JOB_FILES:
                rewrite_redacted(folder / name)
        if config.hydra.mode == RunMode.MULTIRUN:
            rewrite_redacted(Path(config.hydra.sweep.dir) / SWEEP_FILE)


def rewrite_redacted(path: Path) -> bool:
    """Rewrite the YAML file at `path` redacted, atomically, if it holds a secret; whether it did (False if missing)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    content = yaml.safe_load(text)
    clean = redacted(content)
    if clean == content:
        return False
    with atomic_write(path, encoding="utf-8") as f:
        f.write(OmegaConf.to_yaml(OmegaConf.create(clean)))
    return True
