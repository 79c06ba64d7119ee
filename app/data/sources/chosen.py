"""The source `data._target_` names, built once: made patches where data.patches asks, every class checked to train."""

from __future__ import annotations

from app.config import closed_target
from app.data.slides.patches import patched
from app.data.slides.regions import close_open_files
from app.data.source import Source, check_every_class_trains
from app.data.sources.masked_folder import masked_folder_source
from app.errors import ConfigError
from app.schema import option_of
from app.schema.data import patches_of
from app.targets import targets_of


def load_or_generate_source(data_cfg) -> Source:
    """The source `data_cfg._target_` names; synthetic data generated where missing, CIFAR-10 downloaded if asked."""
    source_of = closed_target("data", data_cfg._target_)
    option = option_of("data", data_cfg._target_)
    if option != "table" and (not data_cfg.path or not str(data_cfg.path).strip()):  # a table's: app/rules/data.py
        example = "/path/to/the/prepared/copy (the prepare.out of `python -m app prepare`)" \
            if option == "prepared" else "/path/to/images"
        raise ConfigError(f"config key `data.path` is not set: data={option} needs a folder, "
                          f"e.g. data.path={example}.")
    if option == "folder" and targets_of(data_cfg.task).masks:  # a folder of images and one of masks, not classes
        source_of = masked_folder_source
    source = source_of(data_cfg)
    patches = patches_of(data_cfg)  # folders and tables of large images
    if patches is not None:
        source = patched(source, patches, skip=str(data_cfg.on_bad_sample.value) == "skip")
        close_open_files()  # the masks are read: the slides they opened are the workers' to open now
    if option != "cifar":  # CIFAR-10's classes are the dataset's ten names, which its official batches all hold
        check_every_class_trains(source, f"data.table {data_cfg.table}" if option == "table" else
                                 f"data={option} data.path={data_cfg.path}", targets=targets_of(data_cfg.task))
    return source
