"""CPU augmentation with albumentations, built from conf/augment. Imported by workers: no TF.

A sample's randomness depends on (seed, epoch, sample index) only, never on which worker or
thread draws it, so batches are the same for any worker count and resume can be exact.
albumentations 2.x keeps its own RNG inside each Compose: reseed it per sample, and give each
thread its own Compose. One pair of generators a sample, shared by every transform in turn:
`Compose.set_random_seed` would give each transform its own generator with the same seed, so
every transform would draw the same first number and those with equal `p` would always be
applied together (a flip would always come with a colour change).
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Sequence
from typing import Any

import albumentations as A
import numpy as np

from app.errors import ConfigError


def build_compose(transforms: Sequence[dict], image_size: Sequence[int]) -> A.Compose:
    """The configured transforms, strictly validated, then a resize to `image_size`."""
    from hydra.utils import instantiate

    built = []
    for i, spec in enumerate(transforms):
        where = f"augment.transforms[{i}]"
        if not isinstance(spec, dict) or "_target_" not in spec:
            raise ConfigError(f"config key `{where}` = {spec!r} is not allowed: each entry is a mapping "
                              "with `_target_: albumentations.<Transform>` and that transform's arguments.")
        try:
            transform = instantiate(spec, strict=True, _convert_="all")
        except Exception as error:  # instantiate wraps albumentations' ValueError and import errors
            detail = " ".join(str(error.__cause__ or error).split())
            raise ConfigError(f"config key `{where}` ({spec['_target_']}) is not a valid albumentations "
                              f"transform: {detail}") from None
        if not isinstance(transform, A.BasicTransform):
            raise ConfigError(f"config key `{where}._target_` = {spec['_target_']!r} is not an "
                              "albumentations transform.")
        built.append(transform)
    height, width = image_size
    built.append(A.Resize(height, width))
    return A.Compose(built, strict=True)


def min_source_side(transforms: Sequence[dict], image_size: Sequence[int]) -> int:
    """The short side a decoded image needs so no crop is upsampled: image_size / sqrt(min crop scale)."""
    side = max(image_size)
    scales = [float(min(t["scale"])) for t in transforms
              if str(t.get("_target_", "")).endswith("RandomResizedCrop") and "scale" in t]
    if any(str(t.get("_target_", "")).endswith("RandomResizedCrop") and "scale" not in t for t in transforms):
        scales.append(0.08)  # albumentations' default scale range starts there
    if scales:
        side = math.ceil(side / math.sqrt(max(min(scales), 1e-6)))
    return side


def sample_seed(seed: int, epoch: int, index: int) -> int:
    return int(np.random.SeedSequence([seed, epoch, index]).generate_state(1)[0])


class Augmenter:
    """Picklable: holds plain configs and builds one Compose per thread on first use."""

    def __init__(self, transforms: Sequence[dict], image_size: Sequence[int], *, draft: bool = True):
        self.transforms = [dict(t) for t in transforms]
        self.image_size = tuple(int(s) for s in image_size)
        self.min_short_side = min_source_side(self.transforms, self.image_size) if draft else None
        self._local = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_local"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def compose(self) -> A.Compose:
        compose = getattr(self._local, "compose", None)
        if compose is None:
            compose = self._local.compose = build_compose(self.transforms, self.image_size)
        return compose

    def __call__(self, image: np.ndarray, seed: int, epoch: int, index: int) -> np.ndarray:
        compose = self.compose()
        seed = sample_seed(seed, epoch, index)
        compose.set_random_state(np.random.default_rng(seed), random.Random(seed))
        return compose(image=image)["image"]
