"""A saved run's config read back in today's keys with the overrides a run that exists may change, its backend set."""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from app.config import load
from app.data.copies.prepared import copy_may_move
from app.errors import ConfigError, config_error
from app.frameworks import use_backend
from app.overrides import key_of
from app.runs import checkpoint
from app.runs.migrate import migrated
from app.schema import COMMAND_KEYS, Backend, Config

# What a run may change when it resumes: how long, how it logs, how it loads, and which files are bad
# samples and what becomes of them (the advice a bad sample prints must work on a resumed run too).
# The storage's credentials too: a run's saved config holds its secrets as <redacted> (app/redact.py).
# An MLflow store moved elsewhere (the run's MLflow run goes on there) is given again by its URI.
STORAGE = "data.storage_options"
MLFLOW_STORE = "logger.mlflow.tracking_uri"
SAFE_PREFIXES = ("trainer.epochs", "trainer.log_every_steps", "queue.", "data.on_bad_sample", "data.max_bad_fraction",
                 "data.max_image_pixels", STORAGE, MLFLOW_STORE)


def check_safe(key: str, safe: tuple[str, ...] = SAFE_PREFIXES) -> None:
    """A ConfigError unless `key` is one a run that exists may change: `safe`'s, `resume` or a command's own."""
    if key == "resume" or key.split(".", 1)[0] in COMMAND_KEYS or key.startswith(safe):
        return
    allowed = ", ".join(f"{s}*" if s.endswith(".") else s for s in safe)
    raise ConfigError(f"config key `{key}` cannot change for a run that exists (its config is the one it "
                      f"was trained with); only {allowed} may. Start a new run for other settings.")


def loggers_of(config) -> list[str]:
    """The loggers a config has: the names of its `logger` node's non-null entries."""
    return [name for name, node in (config.get("logger") or {}).items() if node is not None]


def latest_run(outputs: Path) -> Path:
    """The training run under `outputs` whose newest checkpoint is the newest of all."""
    states = list(Path(outputs).glob("**/checkpoints/step-*/state.json"))
    if not states:
        raise config_error("resume", "latest", f"no training run under {Path(outputs).resolve()} has a checkpoint")
    newest = max(states, key=lambda p: p.stat().st_mtime)
    return newest.parent.parent.parent.resolve()


def resumed_config(saved: dict, cfg: DictConfig, overrides: list[str],
                   safe: tuple[str, ...] = SAFE_PREFIXES) -> DictConfig:
    """The checkpoint's config, with the overrides that are safe applied; anything else is an error."""
    result = OmegaConf.create(migrated(saved))
    for override in overrides:
        key = key_of(override)
        if key == "logger" and loggers_of(cfg) == loggers_of(result):  # the run's own (`_loggers_of_run`)
            continue
        if not (key == "data.path" and copy_may_move(result.data)):
            check_safe(key, safe)
        if key == "resume" or key.split(".", 1)[0] in COMMAND_KEYS:  # the command's own (export.*): never the run's
            continue
        OmegaConf.update(result, key, OmegaConf.select(cfg, key), merge=False)
    result.resume = cfg.resume
    return result


def read_run_setting_backend(cfg: DictConfig, safe: tuple[str, ...],
                             backend: Backend | None = None) -> tuple[Path, Config]:
    """(run dir, its config with the `safe` overrides, loaded and validated), Keras set to the run's backend."""
    # set (or to `backend`) but not loaded: a command's checks before `keras_for_run` refuse before TensorFlow starts
    run_dir = Path(cfg.resume)
    cfg = resumed_config(checkpoint.saved_config(run_dir), cfg, list(HydraConfig.get().overrides.task), safe)
    config = load(cfg)
    # the run's backend: a run trained on JAX needs no TensorFlow here
    use_backend(config.trainer, backend)
    return run_dir, config
