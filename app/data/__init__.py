"""Data sources: which file or array row is sample i, its label, and how to read it."""

from __future__ import annotations

from app.data.cifar import cifar_source
from app.data.folder import folder_source_of
from app.data.prepared import PreparedSplit, prepared_source
from app.data.source import ArraySplit, FileSplit, Source
from app.data.synthetic import synthetic_source
from app.errors import ConfigError, config_error
from app.schema import DATA_TARGETS, option_of

__all__ = ["ArraySplit", "FileSplit", "PreparedSplit", "Source", "load_or_generate_source"]

# data._target_ names one of these; the table, not an import by name, so a config can never make a
# worker import anything else
_SOURCES = {f"{fn.__module__}.{fn.__name__}": fn for fn in (synthetic_source, cifar_source, folder_source_of,
                                                                   prepared_source)}


def load_or_generate_source(data_cfg) -> Source:
    """The source `data_cfg._target_` names (relative paths: from the working directory); where missing, synthetic data
    is generated, and CIFAR-10 downloaded with data.download=true."""
    if data_cfg._target_ not in _SOURCES:
        raise config_error("data._target_", data_cfg._target_,
                           f"one of {', '.join(_SOURCES)}: choose it with data=<{'|'.join(DATA_TARGETS)}>")
    if not data_cfg.path or not str(data_cfg.path).strip():
        option = option_of("data", data_cfg._target_)
        example = "/path/to/the/prepared/copy (the prepare.out of `python -m app prepare`)" \
            if option == "prepared" else "/path/to/images"
        raise ConfigError(f"config key `data.path` is not set: data={option} needs a folder, "
                          f"e.g. data.path={example}.")
    return _SOURCES[data_cfg._target_](data_cfg)
