"""Data sources: which file or array row is sample i, its label, and how to read it.

Nothing under app/data ever imports TensorFlow, Keras or the loader: loader worker processes import it.
"""

from __future__ import annotations

from app.data.cifar import cifar_source
from app.data.folder import Held, folder_source
from app.data.source import ArraySplit, FileSplit, Source
from app.data.synthetic import synthetic_source
from app.errors import ConfigError, config_error

__all__ = ["ArraySplit", "FileSplit", "Source", "load_source"]

_SOURCES = {"synthetic": synthetic_source, "cifar": cifar_source,
            "folder": lambda cfg: folder_source(cfg.path, cfg.val_fraction, test=Held(
                getattr(cfg, "test_path", None), getattr(cfg, "test_fraction", 0.0)))}


def load_source(data_cfg) -> Source:
    """The source `data_cfg.name` names; relative paths are relative to the working directory."""
    if data_cfg.name not in _SOURCES:
        raise config_error("data.name", data_cfg.name, f"one of {', '.join(_SOURCES)}")
    if not data_cfg.path or not str(data_cfg.path).strip():
        raise ConfigError(f"config key `data.path` is not set: data={data_cfg.name} needs a folder, "
                          f"e.g. data.path=/path/to/images.")
    return _SOURCES[data_cfg.name](data_cfg)
