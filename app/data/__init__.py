"""Data sources: which file or array row is sample i, its label, and how to read it.

Nothing under app/data imports TensorFlow or Keras: loader worker processes import it.
"""

from __future__ import annotations

from app.data.cifar import cifar_source
from app.data.folder import folder_source
from app.data.source import ArraySplit, FileSplit, Source
from app.data.synthetic import synthetic_source
from app.errors import ConfigError

__all__ = ["ArraySplit", "FileSplit", "Source", "load_source"]


def load_source(data_cfg) -> Source:
    """The source `data_cfg.name` names; relative paths are relative to the working directory."""
    if data_cfg.name == "synthetic":
        return synthetic_source(data_cfg)
    if data_cfg.name == "cifar":
        return cifar_source(data_cfg)
    if data_cfg.name == "folder":
        if not data_cfg.path:
            raise ConfigError("config key `data.path` is not set: data=folder needs the folder of "
                              "images, e.g. data.path=/path/to/images.")
        return folder_source(data_cfg.path, data_cfg.val_fraction)
    raise ConfigError(f"config key `data.name` = {data_cfg.name!r} is not allowed: one of synthetic, "
                      f"cifar, folder.")
