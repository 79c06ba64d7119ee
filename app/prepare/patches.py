"""A patch copy: the training patches fixed once, and what the manifest keeps to score each image from its patches."""

from __future__ import annotations

import dataclasses

from app.config import to_plain
from app.data.source import Source


def fixed_patches(source: Source, *, draws: int | None, seed: int) -> Source:
    """`source` (made patches) with its training patches fixed: the grid, or `draws` random ones an image."""
    return dataclasses.replace(source, train=source.train.fixed(draws=draws, seed=seed))  # a PatchSplit's


RUN_ONLY = {"chunk_cache_mib"}  # how a run reads, not what a copy holds: never in a copy's settings


def manifest_patches(splits: dict, patches, draws: int | None) -> dict:
    """The manifest's `patches`: settings (plain values), draws, each split's images and labels."""
    settings = {key: value for key, value in to_plain(patches).items() if key not in RUN_ONLY}
    return {"settings": settings, "draws": draws,
            "images": {name: list(split.images.paths) for name, split in splits.items()},
            "labels": {name: [int(v) for v in split.images.labels] for name, split in splits.items()}}
