"""CPU augmentation with albumentations, built from conf/augment, and the draft rule (`draft_rule`). A sample's
randomness depends on (seed, epoch, index) only, so batches are the same for any worker count and resume is exact."""

from __future__ import annotations

import logging
import math
import pickle
import random
import threading
from collections.abc import Sequence
from typing import Any

import albumentations as A
import cv2
import numpy as np

from app.config import instantiate_each
from app.data.pixels.images import DEFAULT_MAX_PIXELS, Decode, Pixels
from app.errors import ConfigError

log = logging.getLogger(__name__)


def build_compose(transforms: Sequence[dict], image_size: Sequence[int]) -> A.Compose:
    """The configured transforms, strictly validated (a misspelt argument fails), then a resize to `image_size`."""
    built = instantiate_each(transforms, "augment.transforms", A.BasicTransform, "albumentations.<Transform>",
                             strict=True)
    height, width = image_size
    return A.Compose([*built, A.Resize(height, width)], strict=True)


# Transforms that turn uint8 into floats on the CPU: the float32 boundary is the model's first layer.
FLOAT_MAKERS = frozenset({"Normalize", "ToFloat", "ToTensorV2", "ToTensor", "FromFloat"})


def shipped(compose: A.BaseCompose) -> bytes:
    """A user's Compose pickled for the workers; ValueError for a transform that makes floats, or one pickle cannot."""
    for transform in every_transform(compose):
        name = type(transform).__name__
        if name in FLOAT_MAKERS:
            raise ValueError(f"transform {name} turns the uint8 image into floats on the CPU; the loader hands "
                             "uint8 batches on and the model's first layer (app.library.boundary) makes float32 "
                             f"on the device. Leave {name} out of the Compose.")
    try:
        return pickle.dumps(compose)
    except Exception as error:  # noqa: BLE001 - which transform, below
        culprit = next((t for t in every_transform(compose) if not _pickles(t)), compose)
        raise ValueError(f"transform {type(culprit).__name__} cannot be shipped to the worker processes: pickle "
                         f"fails ({error}). A function it calls must be defined at the top level of a module or "
                         "script (not a lambda or a nested function).") from None


def every_transform(compose: A.BaseCompose) -> list:
    """Every transform inside `compose`, nested ones (OneOf, Sequential) included."""
    found = []
    for transform in compose.transforms:
        found.append(transform)
        if isinstance(transform, A.BaseCompose):
            found += every_transform(transform)
    return found


def check_on_zeros(compose: A.BaseCompose, pixels: Pixels, image_size: Sequence[int]) -> None:
    """Each transform of `compose`, forced to fire on zeros of the run's bands and type (twice its size): one that
    raises, or hands back another type, is refused by name (ConfigError) before any worker starts."""
    size = tuple(2 * side for side in image_size)
    zeros, rgb = np.zeros((*size, pixels.bands), pixels.dtype), np.zeros((*size, 3), np.uint8)
    for transform in every_transform(compose):
        if isinstance(transform, A.BaseCompose):
            continue
        name, kind = type(transform).__name__, f"{pixels.bands}-band {pixels.dtype}"
        try:
            out = transform(image=zeros, force_apply=True)["image"]
        except Exception as error:  # noqa: BLE001 - a failure of these bands or this type, not of the size
            if not _fires(transform, rgb):
                continue
            raise ConfigError(f"config key `augment.transforms`: {name} fails on {kind} images "
                              f"({type(error).__name__}: {' '.join(str(error).split())[:200]}): leave it out for this "
                              "data (docs/data.md lists the transforms that keep any bands and type).") from None
        if out.dtype != zeros.dtype:
            raise ConfigError(f"config key `augment.transforms`: {name} turns {kind} images into {out.dtype}, which "
                              f"the loader would cut back to {pixels.dtype} silently: leave it out for this data.")


def check_pairs(compose: A.BaseCompose, pixels: Pixels, image_size: Sequence[int]) -> None:
    """Each transform of `compose` forced on an (image, mask) pair of zeros: one that fails on the pair, or moves a mask
    other than by nearest neighbour (which would invent class indices between two), is refused by name."""
    size = tuple(2 * side for side in image_size)
    image, mask = np.zeros((*size, pixels.bands), pixels.dtype), np.zeros(size, np.uint8)
    for transform in every_transform(compose):
        name = type(transform).__name__
        if isinstance(transform, A.BaseCompose):
            continue
        if getattr(transform, "mask_interpolation", cv2.INTER_NEAREST) != cv2.INTER_NEAREST:
            raise ConfigError(f"config key `augment.transforms`: {name} resizes masks with mask_interpolation="
                              f"{transform.mask_interpolation}: a mask's values are class indices, which only nearest "
                              "neighbour (0, the default) keeps. Drop its mask_interpolation.")
        try:
            out = transform(image=image, mask=mask, force_apply=True)
        except Exception as error:  # noqa: BLE001 - named below
            raise ConfigError(f"config key `augment.transforms`: {name} fails on an image with its mask "
                              f"({type(error).__name__}: {' '.join(str(error).split())[:200]}): leave it out with "
                              "data.task=segmentation.") from None
        if out["image"].dtype != image.dtype or out["mask"].dtype != mask.dtype:
            raise ConfigError(f"config key `augment.transforms`: {name} turns the image or its mask into another "
                              "type: leave it out with data.task=segmentation.")


def _fires(transform, image: np.ndarray) -> bool:
    try:
        transform(image=image, force_apply=True)
    except Exception:  # noqa: BLE001 - any failure: the size, or the transform's own arguments
        return False
    return True


def _pickles(transform) -> bool:
    try:
        pickle.dumps(transform)
    except Exception:  # noqa: BLE001 - any failure means "cannot ship"
        return False
    return True


def with_resize(compose: A.BaseCompose, image_size: Sequence[int]) -> A.Compose:
    """A user's Compose, then the resize; a plain one applied always is flattened, for the draft rule to read."""
    height, width = image_size
    if type(compose) is A.Compose and compose.p >= 1:
        return A.Compose([*compose.transforms, A.Resize(height, width)])
    return A.Compose([compose, A.Resize(height, width)])


def eval_transforms(augment, image_size: Sequence[int]) -> list[dict]:
    """Evaluation's transforms: the resize alone, or a short-side resize (augment.eval_crop_fraction), centre crop."""
    if augment.eval_transform == "resize":
        return []
    height, width = (int(s) for s in image_size)
    short = round(max(height, width) / augment.eval_crop_fraction)
    return [{"_target_": "albumentations.SmallestMaxSize", "max_size": short},
            {"_target_": "albumentations.CenterCrop", "height": height, "width": width}]


# Transforms whose result does not depend on the image's resolution: the draft rule looks past them.
RESOLUTION_FREE = frozenset({
    "HorizontalFlip", "VerticalFlip", "Transpose", "RandomRotate90", "D4", "SquareSymmetry",
    "RandomBrightnessContrast", "ColorJitter", "HueSaturationValue", "RGBShift", "RandomGamma", "ToGray",
    "ChannelShuffle", "InvertImg", "Solarize", "Posterize", "Equalize", "ToSepia", "RandomToneCurve"})
# Transforms whose arguments are in source pixels: a reduced decode would change what they do.
SOURCE_PIXELS = frozenset({
    "RandomCrop", "CenterCrop", "Crop", "RandomSizedCrop", "PadIfNeeded", "CropNonEmptyMaskIfExists",
    "RandomCropNearBBox", "RandomSizedBBoxSafeCrop", "CropAndPad", "AtLeastOneBBoxRandomCrop"})


def needed_short_side(transform: A.BasicTransform) -> int | None:
    """The short side a fixed-output resizing transform's input needs so its output is never upsampled; else None."""
    name = type(transform).__name__
    if name == "RandomResizedCrop":
        (height, width), (low, _), (r_min, r_max) = transform.size, transform.scale, transform.ratio
        # a crop of area low·A and aspect r (width/height) is sqrt(low·A/r) high and sqrt(low·A·r) wide
        side = max(height * math.sqrt(r_max), width / math.sqrt(r_min)) / math.sqrt(max(low, 1e-6))
        return math.ceil(side)
    if name == "Resize":
        return max(transform.height, transform.width)
    if name in ("SmallestMaxSize", "LongestMaxSize"):
        sizes = [transform.max_size, getattr(transform, "max_size_hw", None)]
        flat = [int(v) for s in sizes if s is not None for v in (s if isinstance(s, (list, tuple)) else [s])
                if v is not None]
        return max(flat) if flat else None
    return None


def draft_rule(compose: A.Compose, enabled: bool = True) -> tuple[int | None, str]:
    """(the short side a JPEG may be reduced to by draft decoding, or None for a full decode; why)."""
    if not enabled:
        return None, "draft off: data.decode.draft=false"
    need, why = short_side_rule(compose, "draft rule")
    if need is None:
        return None, f"draft off: {why}"
    return need, f"draft allowed: JPEGs decoded at 1/2, 1/4 or 1/8 scale while the short side stays at least {why}"


def short_side_rule(compose: A.Compose, rule: str) -> tuple[int | None, str]:
    """(the smallest short side that no transform of `compose` upsamples, and why) or (None, why none can be told),
    read off the transforms up to the first that always resizes; `rule` names the rule in the reason."""
    need, by = 0, []
    for transform in compose.transforms:
        name = type(transform).__name__
        if name in RESOLUTION_FREE:
            continue
        if name in SOURCE_PIXELS:
            return None, f"{name} works in source pixels"
        side = needed_short_side(transform)
        if side is None:
            return None, f"{name} is not known to the {rule} (its arguments may be in source pixels)"
        need, by = max(need, side), [*by, name]
        if transform.p >= 1:
            return need, f"{need} px ({' and '.join(by)} {'needs' if len(by) == 1 else 'need'} that)"
    return None, "no transform resizes to a fixed output"


def augmenters(data, splits: dict[str, list], image_size: tuple[int, int] | None = None,
               pixels: Pixels = Pixels(), masks: bool = False) -> dict[str, Augmenter]:
    """One Augmenter a split of `splits` (name → transforms; `masks`: of image and mask pairs); logs the draft rule."""
    built, size = {}, image_size or data.image_size
    for name, transforms in splits.items():
        built[name] = (PairAugmenter if masks else Augmenter)(transforms, size, draft=data.decode.draft,
                                                             max_pixels=data.max_image_pixels, pixels=pixels)
        if masks and data.ignore_index is not None:
            built[name].fill_mask = int(data.ignore_index)
        log.info("%s split: %s", name, built[name].draft_reason)
    return built


def sample_seed(seed: int, epoch: int, index: int, draw: int = 0) -> int:
    """A sample's augmentation seed: its (seed, epoch, index), and a later draw of it in one epoch its own."""
    return int(np.random.SeedSequence([seed, epoch, index, *([draw] if draw else [])]).generate_state(1)[0])


class Augmenter:
    """Picklable: holds plain configs (or a user's Compose, pickled) and builds one Compose a thread on first use."""

    def __init__(self, transforms: Sequence[dict] | A.BaseCompose, image_size: Sequence[int], *, draft: bool = True,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, pixels: Pixels = Pixels()):
        own = isinstance(transforms, A.BaseCompose)
        self.transforms = [] if own else [dict(t) for t in transforms]
        self.pickled = shipped(transforms) if own else None
        self.needs_main = self.pickled is not None and b"__main__" in self.pickled  # defined in the user's script
        self.image_size = tuple(int(s) for s in image_size)
        self._local = threading.local()
        min_short_side, self.draft_reason = draft_rule(self.compose(), draft and not self.masks)
        self.check(pixels)
        self.decode = Decode(min_short_side, max_pixels, pixels)  # how the files of this pipeline are decoded

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_local"] = None  # each process and thread builds its own Compose
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def compose(self) -> A.Compose:
        compose = getattr(self._local, "compose", None)
        if compose is None:
            built = (with_resize(pickle.loads(self.pickled), self.image_size) if self.pickled is not None
                     else build_compose(self.transforms, self.image_size))
            compose = self._local.compose = built
        return compose

    masks = False  # a sample is an image

    def check(self, pixels: Pixels) -> None:
        """Each transform tried at start on the run's bands and type (8-bit RGB: every albumentations one takes it)."""
        if pixels != Pixels():
            check_on_zeros(self.compose(), pixels, self.image_size)

    def __call__(self, sample, seed: int, epoch: int, index: int, draw: int = 0):
        return self._checked(self.seeded(seed, epoch, index, draw)(image=sample)["image"])

    def seeded(self, seed: int, epoch: int, index: int, draw: int = 0) -> A.Compose:
        """The Compose, its randomness the sample's own."""
        compose = self.compose()
        seed = sample_seed(seed, epoch, index, draw)
        # One pair of generators a sample, shared by every transform in turn: `Compose.set_random_seed` would give
        # each transform its own generator with the same seed, so transforms of equal `p` would fire together.
        compose.set_random_state(np.random.default_rng(seed), random.Random(seed))
        return compose

    def _checked(self, out: np.ndarray) -> np.ndarray:
        if out.dtype != self.decode.pixels.dtype:  # the ring holds the images' integers: a float would be cut silently
            raise TypeError(f"the transforms made a {out.dtype} image, not {self.decode.pixels.dtype}: leave out those "
                            f"that make floats ({', '.join(sorted(FLOAT_MAKERS))}); the model's first layer makes "
                            "float32")
        return out


class PairAugmenter(Augmenter):
    """(image, mask) pairs (segmentation): spatial transforms move both (nearest for the mask), no draft decode."""

    masks = True
    fill_mask: int | None = None  # data.ignore_index: a mask's value where a transform brings pixels in (a rotation)

    def check(self, pixels: Pixels) -> None:
        check_pairs(self.compose(), pixels, self.image_size)

    def __call__(self, sample, seed: int, epoch: int, index: int, draw: int = 0):
        compose = self.seeded(seed, epoch, index, draw)
        if self.fill_mask is not None:
            filled_with(compose, self.fill_mask)
        done = compose(image=sample[0], mask=sample[1])
        return self._checked(done["image"]), done["mask"]


def filled_with(compose: A.BaseCompose, value: int) -> None:
    """Transforms filling a mask with class 0 where they bring pixels in (a rotation) fill it with `value`."""
    for transform in every_transform(compose):
        if getattr(transform, "fill_mask", None) == 0:
            transform.fill_mask = value
