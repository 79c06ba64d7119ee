"""`bench.prepared=[<copy>, ...]`: the modes on prepared copies too; one at a URL also via `bench.cache_dir` if set."""

from __future__ import annotations

from app.config import load, to_plain
from app.data.copies.storage import is_url
from app.data.sources.chosen import load_or_generate_source
from app.errors import ConfigError
from app.schema import DATA_TARGETS

SHARED_KEYS = ("image_size", "batch_size", "on_bad_sample", "max_bad_fraction", "decode", "max_image_pixels")


def row_name(mode: str, copy: str | None) -> str:
    return mode if copy is None else f"{mode}@{copy}"


CACHED = " cached"  # the label of a copy at a URL read through bench.cache_dir


def labels(bench) -> list[str]:
    """Each copy's row label: each of bench.prepared, and each URL again as `<url> cached` with bench.cache_dir set."""
    cache = bench.cache_dir
    return [label for copy in bench.prepared
            for label in ([copy, copy + CACHED] if cache and is_url(copy) else [copy])]


def copy_config(config, label: str):
    """The loaded config benching copy `label` alone: data=prepared, SHARED_KEYS kept, `<url> cached` via cache_dir."""
    copy = label.removesuffix(CACHED)
    plain = to_plain(config)
    plain["data"] = {"_target_": DATA_TARGETS["prepared"], "path": copy,
                     "cache_dir": config.bench.cache_dir if label.endswith(CACHED) else None,
                     **{key: plain["data"][key] for key in SHARED_KEYS}}
    return load(plain, root=type(config))


def copy_source_of(config, copy: str, source):
    """The copy's source, refused unless it was prepared from `source` (the benched data)."""
    copied = load_or_generate_source(copy_config(config, copy).data)
    copy = copy.removesuffix(CACHED)
    of = copied.split.get("prepared", {}).get("of", {})
    if of.get("fingerprint") != source.fingerprint:
        raise ConfigError(f"config key `bench.prepared` names {copy}, a prepared copy of {of.get('name')} at "
                          f"{of.get('path')}, not of the data benched here ({source.name}; fingerprints differ): a "
                          "side-by-side figure needs the copy of the same files. Prepare one with `python -m app "
                          "prepare` and the same data.* keys, or bench the copy alone with data=prepared.")
    return copied


def ratios(results: dict, modes: list[str], copies: list[str]) -> dict:
    """Each copy's rate over the originals' (`_vs_original`), each later one's over the first's (`_vs_first_copy`)."""
    ok = {name: r["images_per_s"] for name, r in results.items() if "error" not in r}
    derived = {}
    for mode in modes:
        for n, copy in enumerate(copies):
            name = row_name(mode, copy)
            if name in ok and mode in ok:
                derived[f"{name}_vs_original"] = ok[name] / ok[mode]
            first = row_name(mode, copies[0])
            if n and name in ok and first in ok:
                derived[f"{name}_vs_first_copy"] = ok[name] / ok[first]
    return derived
