"""The data group's rules, by its source's schema type; with the trainer's, what data.task needs (app/targets.py)."""

from __future__ import annotations

from app.errors import config_error
from app.io import is_url
from app.rules.common import check_seed, require
from app.schema import (
    FolderDataConfig,
    PreparedDataConfig,
    SyntheticDataConfig,
    TableDataConfig,
    option_of,
    schema_of,
)
from app.schema.data import columns_of, patches_of
from app.targets import targets_of


def check(data) -> None:
    kind = schema_of(data)
    _check_common(data)
    _check_source(data, kind)
    _check_table(data, kind)
    _check_patches(data)


def check_with_trainer(data, trainer) -> None:
    targets_of(data.task).check(data, trainer)


def _check_common(d) -> None:
    size = list(d.image_size)
    require(len(size) == 2 and all(s >= 8 for s in size), "data.image_size", size,
            "two integers [H, W], each at least 8")
    require(d.batch_size >= 1, "data.batch_size", d.batch_size, "an integer of at least 1")
    require(0.0 <= d.max_bad_fraction <= 1.0, "data.max_bad_fraction", d.max_bad_fraction, "a fraction from 0 to 1")
    require(_bands_listed(d.channels), "data.channels", d.channels if isinstance(d.channels, str) else
            list(d.channels), "rgb (1, 3 or 4 bands made RGB), all (every band an image has), or band indices from "
            "0, each once, e.g. data.channels=[3,2,1]")
    require(d.max_image_pixels is None or d.max_image_pixels >= 1, "data.max_image_pixels", d.max_image_pixels,
            "null (no limit) or a positive number of pixels")


def _check_source(d, kind: type) -> None:
    if issubclass(kind, PreparedDataConfig):
        require(d.val_fraction is None, "data.val_fraction", d.val_fraction,
                "null with data=prepared: the copy's validation split is the one `python -m app prepare` wrote. "
                "Drop the override, or prepare the copy again with data.val_fraction set for its source")
        require(d.cache_max_gb > 0, "data.cache_max_gb", d.cache_max_gb, "a positive number of GB (10⁹ bytes)")
        require(d.cache_dir is None or is_url(d.path), "data.cache_dir", d.cache_dir,
                f"null for a copy in a local folder (data.path={d.path} is read in place: a cache would only copy "
                "it); data.cache_dir keeps the shards of a copy at a URL (s3://, gs://, https://)")
    else:
        require(not is_url(d.path), "data.path", d.path,
                f"a local folder: data={option_of('data', d._target_)} (and prepare) read local files only. For "
                "data in object storage, prepare a copy there from a local folder (`python -m app prepare ... "
                "prepare.out=<URL>`) and train with data=prepared data.path=<its URL>")
        require(d.val_fraction is not None and 0.0 < d.val_fraction < 1.0, "data.val_fraction", d.val_fraction,
                "a fraction strictly between 0 and 1")
    if issubclass(kind, FolderDataConfig):
        require(d.path is not None and str(d.path).strip() != "", "data.path", d.path,
                "data=folder needs the folder of images: add data.path=/path/to/images "
                "(class folders <path>/<class>/*, or <path>/train/<class>/* and <path>/val/<class>/*)")
    if issubclass(kind, (FolderDataConfig, TableDataConfig)):
        require(0.0 <= d.test_fraction < 1.0 and d.val_fraction + d.test_fraction < 1.0, "data.test_fraction",
                d.test_fraction, f"a fraction from 0 (no test split drawn) to below 1 − data.val_fraction "
                f"({1 - d.val_fraction:g}), so training keeps images")
    if issubclass(kind, SyntheticDataConfig):
        check_seed("data.seed", d.seed)
        require(d.num_classes >= 2, "data.num_classes", d.num_classes, "at least 2")
        require(d.num_images >= 2 * d.num_classes, "data.num_images", d.num_images,
                f"at least 2 images a class ({2 * d.num_classes} for {d.num_classes} classes)")
        require(d.source_size >= 16, "data.source_size", d.source_size, "at least 16 pixels")
        require(d.num_test_images is None or d.num_test_images >= 0, "data.num_test_images", d.num_test_images,
                "null (a quarter of num_images), 0 (no test split) or more")


def _bands_listed(channels) -> bool:
    if isinstance(channels, str):
        return channels in ("rgb", "all")
    listed = list(channels)
    return bool(listed) and len(set(listed)) == len(listed) and all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in listed)


def _check_table(d, kind: type) -> None:
    # data=table's keys, and data.sampling=weights's need of a table's weight column
    table = issubclass(kind, TableDataConfig)
    require(str(getattr(d.sampling, "value", d.sampling)) != "weights" or (table and bool(d.columns.weight)),
            "data.sampling", "weights", "uniform or balanced here: the weights are a table's column (data=table "
            "data.columns.weight=<name>)")
    if table:
        require(bool(d.table and str(d.table).strip()), "data.table", d.table, "the table of images and labels, "
                "e.g. data.table=/data/train.csv (CSV, TSV, JSON Lines or Parquet)")
        require(d.path is None, "data.path", d.path, "null with data=table: it reads data.table (and data.root, "
                "the folder its relative paths are under)")
        require(d.path_format is None or d.path_format.count("{}") == 1, "data.path_format", d.path_format,
                'a pattern with one {} for the id, e.g. "{}.jpg" or "images/{}.tif"')
        require(not d.classes or len(set(d.classes)) == len(d.classes), "data.classes", list(d.classes or []),
                "each class named once")
        require(not (d.columns.split and d.test_fraction), "data.test_fraction", d.test_fraction,
                "0 with data.columns.split: the split column gives the test split (its `test` rows)")
        require(bool(d.columns.label or d.columns.labels), "data.columns.label", d.columns.label,
                "the column of each row's label, e.g. data.columns.label=diagnosis (null only beside "
                "data.columns.labels, data.task=multilabel's 0/1 column a class)")
    uncertain = d.uncertain if table else None  # data=table's alone
    require(uncertain in (None, "zero", "one"), "data.uncertain", uncertain,
            "null (an uncertain -1 refused), zero or one")


def _check_patches(data) -> None:
    p, columns = patches_of(data), columns_of(data)
    if columns is not None and (columns.x is None) != (columns.y is None):
        missing = "x" if columns.x is None else "y"
        raise config_error(f"data.columns.{missing}", None, "the column of a patch's other coordinate: a patch's "
                           "corner takes both data.columns.x and data.columns.y")
    if p is None:
        if columns is not None and columns.x is not None:
            raise config_error("data.patches.size", None, "a patch's [height, width] with data.columns.x and y: "
                               "each row is then a patch of its image")
        return
    pairs = {"data.patches.size": p.size, "data.patches.stride": p.stride}
    for key, value in pairs.items():
        if value is not None and not (len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value)):
            raise config_error(key, list(value), "two positive integers, [height, width] in the patch's pixels")
    given = [k for k in ("level", "downsample", "mpp") if getattr(p, k) is not None]
    if len(given) > 1:
        raise config_error(f"data.patches.{given[1]}", getattr(p, given[1]), f"null beside data.patches.{given[0]}: "
                           "one resolution, a pyramid level, a downsample or µm a pixel")
    for key, ok, allowed in (("level", p.level is None or p.level >= 0, "a level of the pyramid, 0 the largest"),
                             ("downsample", p.downsample is None or p.downsample >= 1, "1 or more"),
                             ("mpp", p.mpp is None or p.mpp > 0, "µm a pixel, above 0 (0.5 is a 20× scan)"),
                             ("per_image", p.per_image >= 1, "1 or more patches an image an epoch"),
                             ("min_foreground", 0 <= p.min_foreground <= 1, "a share, 0 (every patch) to 1"),
                             ("top_k", p.top_k >= 1, "1 or more"),
                             ("max_chunk_pixels", p.max_chunk_pixels >= 1, "1 or more"),
                             ("chunk_cache_mib", p.chunk_cache_mib >= 0, "0 (none kept) or more MiB a worker")):
        if not ok:
            raise config_error(f"data.patches.{key}", getattr(p, key), allowed)
    targets_of(data.task).check_patches()
