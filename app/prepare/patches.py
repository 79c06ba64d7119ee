"""A patch source's copy (data.patches): its training patches fixed once (the grid, or prepare.patch_draws an image)
and what the manifest keeps so a run on the copy scores each image from its patches as a run on the slides does."""

from __future__ import annotations

import dataclasses
from enum import Enum

from app.data.patches import fixed_split
from app.data.source import Source


def fixed_patches(source: Source, patches, *, draws: int | None, seed: int) -> Source:
    """`source` (made patches) with its training patches fixed: the grid, or `draws` random ones an image."""
    return dataclasses.replace(source, train=fixed_split(source.train, patches, draws=draws, seed=seed))


def manifest_patches(splits: dict, patches, draws: int | None) -> dict:
    """The manifest's `patches`: settings (enums as values), draws, each split's images and labels."""
    settings = {key: value.value if isinstance(value, Enum) else value
                for key, value in dataclasses.asdict(patches).items()}
    return {"settings": settings, "draws": draws,
            "images": {name: list(split.images.paths) for name, split in splits.items()},
            "labels": {name: [int(v) for v in split.images.labels] for name, split in splits.items()}}
