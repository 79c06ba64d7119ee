"""A finished run opened for inference: its config read, then Keras loaded quietly on the run's backend."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from app.frameworks import load_keras, query_devices_quietly
from app.runs.saved import read_run_setting_backend
from app.schema import Config


def open_run(cfg: DictConfig, safe: tuple[str, ...]) -> tuple[Path, Config]:
    run_dir, config = read_run_setting_backend(cfg, safe)
    keras_for_run()
    return run_dir, config


def keras_for_run() -> None:
    """Keras loaded quietly on the backend the run's config set; call it before importing a Keras-side module."""
    load_keras()
    query_devices_quietly()
