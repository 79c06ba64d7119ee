"""A prepared copy from a loaded config, start to end, as `python -m app prepare` runs it, into a folder or a URL."""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

from app.data.copies.copy_checks import source_stamps
from app.data.copies.prepared import prepared_source
from app.data.copies.shards import MANIFEST_KEYS, Manifest
from app.data.copies.storage import Store, is_url
from app.data.pixels.images import Decode
from app.data.pixels.pixels import run_pixels
from app.data.sources.chosen import load_or_generate_source
from app.errors import ConfigError, DataError
from app.prepare import payback
from app.prepare.encode import Encoding, stored_label
from app.prepare.finish import write_copy_index
from app.prepare.job import Job, estimate_per_shard, write_shards
from app.prepare.patches import fixed_patches, manifest_patches
from app.prepare.plan import make_plan, read_plan, read_records, write_plan
from app.prepare.rule import stored_short_side
from app.prepare.whole import copy_damage
from app.schema.data import PreparedDataConfig, patches_of
from app.targets import targets_of

log = logging.getLogger("app.prepare")
READ_ONLY = ("http", "https")  # URL schemes fsspec reads but cannot write


def write_prepared_copy(config, *, workers: int, per_shard: int | None = None, overrides: Sequence[str] = ()) -> str:
    """`config.data` into prepare.out; its summary. `per_shard`: tests' shard size; `overrides`: for the manifest."""
    store = _refuse_unsupported(config)
    with held_alone(store):
        return _write_copy(config, store, workers=workers, per_shard=per_shard, overrides=overrides)


@contextmanager
def held_alone(store: Store) -> Iterator[None]:
    """A local copy's folder flock-ed for the block: a second prepare into it is refused by name (URLs: no lock)."""
    if store.local is None or store.local.is_file():  # a file: refused by name when its plan is read
        yield
        return
    store.local.mkdir(parents=True, exist_ok=True)
    folder = os.open(store.local, os.O_RDONLY | os.O_DIRECTORY)  # not inherited by the workers: a kill frees it
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataError(f"prepare.out={store} is being written by another prepare now: wait until it ends (then "
                            "run this one again: a finished copy is kept), or give another folder.") from None
        yield
    finally:
        os.close(folder)


def _write_copy(config, store: Store, *, workers: int, per_shard: int | None, overrides: Sequence[str]) -> str:
    short_side, why = stored_short_side(config)
    log.info("%s", why)
    source = load_or_generate_source(config.data)
    patches = patches_of(config.data)
    if patches is not None:  # the training patches fixed once: the grid, or prepare.patch_draws an image
        source = fixed_patches(source, draws=config.prepare.patch_draws, seed=config.seed)
    splits = source.splits()
    kept = manifest_patches(splits, patches, config.prepare.patch_draws) if patches is not None else {}
    p, pixels = config.prepare, run_pixels(config.data, splits["train"])
    encoding = Encoding(short_side=short_side, format=p.format, quality=p.quality,
                        max_pixels=config.data.max_image_pixels, pixels=pixels)
    job = Job(store=store, splits=splits, encoding=encoding, workers=workers, seed=config.seed,
              on_bad_sample=config.data.on_bad_sample.value, max_bad_fraction=config.data.max_bad_fraction)
    key = {**_plan_key(config, source, splits, short_side), "bands": pixels.bands, "dtype": pixels.dtype,
           "channels": pixels.channels if isinstance(pixels.channels, str) else list(pixels.channels),
           **({"patches": {"settings": kept["settings"], "draws": kept["draws"]}} if kept else {})}
    plan = read_plan(store, key)
    found = read_records(store, plan) if plan is not None else {}  # read once: each is a request or two at a URL
    damage = copy_damage(store, plan, found)
    if damage == []:
        return f"{store} is up to date: a finished copy of this source with these settings, whole; nothing written."
    if damage:
        log.warning("%s is not whole: %s. Writing that again; the rest is kept.", store, "; ".join(damage))
    begun = time.monotonic()
    if plan is None:
        sizes = {name: per_shard for name in splits} if per_shard else estimate_per_shard(job, p.shard_mb)
        plan = make_plan(key=key, counts={name: len(split) for name, split in splits.items()}, sizes=sizes)
        write_plan(store, plan)
        found = read_records(store, plan)
    records, encoded = write_shards(job, plan, found)
    manifest = Manifest(class_names=list(source.class_names), splits={}, source=_source_of(config.data, source),
                        short_side=short_side, format=p.format, quality=p.quality if p.format == "jpeg" else None,
                        app_version=version("app"), assignment=source.split, overrides=_replayable(overrides),
                        task=str(config.data.task.value), dtype=pixels.dtype, bands=pixels.bands, patches=kept,
                        stamps=source_stamps(splits, config.data), ignore_index=config.data.ignore_index)
    write_copy_index(store, plan=plan, records=records, manifest=manifest, splits=splits)
    return _summary(config, job, plan, records=records, seconds=time.monotonic() - begun)


def _refuse_unsupported(config) -> Store:
    """The copy's Store, once the settings prepare cannot work with are refused."""
    p, data = config.prepare, config.data
    if not p.out or not str(p.out).strip():
        raise ConfigError("config key `prepare.out` is not set: give the folder or URL the prepared copy is written "
                          "to, e.g. python -m app prepare data=folder data.path=/path/to/images "
                          "prepare.out=/path/to/copy (or prepare.out=s3://bucket/copy).")
    if data.path and is_url(data.path):
        raise ConfigError(f"config key `data.path` = {data.path!r} is a URL: prepare reads a local source (it writes "
                          "to a URL: prepare.out may be s3:// or gs://). Copy the source to a local folder and give "
                          "its path, e.g. data.path=/path/to/images.")
    scheme = str(p.out).split("://", 1)[0].lower()
    if is_url(p.out) and scheme in READ_ONLY:
        raise ConfigError(f"config key `prepare.out` = {p.out!r} is an {scheme}:// URL, which can only be read: "
                          "prepare writes a copy to a local folder or to object storage, e.g. "
                          "prepare.out=s3://bucket/copy or prepare.out=gs://bucket/copy.")
    _refuse_out_inside_the_source(p.out, data.path)
    if p.format == "jpeg" and (data.dtype.value != "uint8" or data.channels != "rgb"):
        raise ConfigError(f"config key `prepare.format` = 'jpeg' is not allowed for data.dtype={data.dtype.value} "
                          f"data.channels={data.channels}: JPEG holds 8-bit RGB only. Use prepare.format=raw: the "
                          "copy stores the images' own bands and integers as .npy.")
    if data.on_bad_sample.value == "mark":
        raise ConfigError("config key `data.on_bad_sample` = 'mark' is not allowed for prepare: mark keeps a "
                          "stand-in for a sample being scored, and a copy has none to keep. Use "
                          "data.on_bad_sample=skip to leave bad files out (listed in bad_samples.txt), or raise.")
    return Store.at(str(p.out), p.storage_options)


def _refuse_out_inside_the_source(out, path) -> None:
    """A copy written inside the folder it is made of would be read back as a class of it, by this prepare too."""
    if not path or is_url(out):
        return
    source, folder = (Path(str(p)).expanduser().absolute().resolve() for p in (path, out))
    if folder == source or source in folder.parents:
        raise ConfigError(f"config key `prepare.out` = {out!r} is inside data.path={path}: the copy would be read as "
                          "part of its own source (a class folder of it). Give a folder outside data.path, e.g. "
                          f"prepare.out={source.parent / (source.name + '_copy')}.")


def _plan_key(config, source, splits: dict, short_side: int | None) -> dict:
    """What a copy is of: the settings that change its bytes, and the source's identity."""
    p = config.prepare
    test = splits.get("test")
    described = "\n".join(f"{test.describe(i)}\t{stored_label(test.labels[i])}"
                          for i in range(len(test))) if test else ""
    return {"short_side": short_side, "format": p.format, "quality": p.quality if p.format == "jpeg" else None,
            "shard_mb": p.shard_mb, "seed": config.seed, "max_image_pixels": config.data.max_image_pixels,
            "source": source.name, "fingerprint": source.fingerprint,
            "counts": {name: len(split) for name, split in splits.items()},
            "test": hashlib.sha256(described.encode()).hexdigest(),
            # what a mask's values mean (the source's fingerprint covers its files alone)
            **({"masks": _mask_values(config.data, source)} if targets_of(config.data.task).masks else {})}


# the classes, the ignore index and, for patches, the class no polygon covers (data.masks_background); a whole-image
# copy's key stays as it was before patch copies kept masks (a polygon needs patches)
def _mask_values(data, source) -> dict:
    patches = patches_of(data) is not None
    background = {"background": data.masks_background} if patches and data.masks_background is not None else {}
    return {"classes": list(source.class_names), "ignore_index": data.ignore_index, **background}


def _source_of(data, source) -> dict:
    path = str(Path(str(data.path)).expanduser().absolute()) if data.path else None
    return {"name": source.name, "path": path, "fingerprint": source.fingerprint}


def _replayable(overrides: Sequence[str]) -> list[str]:
    """The overrides a prepare again needs beside MANIFEST_KEYS: not Hydra's own, nor secrets (storage options)."""
    def key(override: str) -> str:
        return override.split("=", 1)[0].lstrip("+~")
    return [o for o in overrides if not key(o).startswith("hydra") and "storage_options" not in key(o)
            and key(o) not in MANIFEST_KEYS]


def _summary(config, job: Job, plan: dict, *, records: dict, seconds: float) -> str:
    store = job.store
    after = sum(store.size(name) for planned in plan["splits"].values() for name in planned["shards"])
    before = sum(record["source_bytes"] for split in records.values() for record in split)
    bad = sum(len(record["bad"]) for split in records.values() for record in split)
    files = sum(len(record["rows"]) for split in records.values() for record in split) + bad
    train = job.splits["train"]
    draft = job.encoding.short_side if config.data.decode.draft and train.mask_dtype is None else None  # no mask's
    pixels, data = job.encoding.pixels, config.data
    original = payback.seconds_per_sample(train, Decode(draft, data.max_image_pixels, pixels))
    copy = prepared_source(PreparedDataConfig(path=str(store), storage_options=dict(config.prepare.storage_options),
                                              task=data.task, classes=data.classes, ignore_index=data.ignore_index))
    prepared = payback.seconds_per_sample(copy.train, Decode(None, config.data.max_image_pixels, pixels))
    return payback.summary_line(files=files, bad=bad, sizes=(before, after), seconds=seconds,
                                per_sample=(original, prepared, len(train)))
