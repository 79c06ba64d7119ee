"""Whole images each with a mask of class indices (data.task=segmentation): a sample is the (image, mask) pair."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.data.pixels.decode import Decode
from app.data.pixels.label_masks import check_mask_values, read_mask
from app.data.source import FileSplit, bad_sample_reason
from app.errors import BadSampleError
from app.targets import mask_dtype


@dataclass(frozen=True)
class MaskRule:
    """What a mask's values may be: a class index below `classes`, or `ignore_index` (no loss, no metric); the
    classes' `names`, and the class (`background`, an index) of pixels no polygon annotates, else the ignore index."""

    classes: int
    ignore_index: int | None = None
    names: tuple[str, ...] = ()
    background: int | None = None

    @classmethod
    def of(cls, data_cfg) -> MaskRule:
        """data.classes, data.ignore_index and data.masks_background (checked by the rules: one of the classes)."""
        names = tuple(data_cfg.classes)
        chosen = data_cfg.masks_background
        return cls(len(names), data_cfg.ignore_index, names, None if chosen is None else names.index(chosen))

    @property
    def dtype(self) -> str:
        return mask_dtype(self.classes, self.ignore_index)

    @property
    def unannotated(self) -> int | None:  # what a pixel no polygon covers is: the background class, else ignored
        return self.ignore_index if self.background is None else self.background


class MaskedFileSplit(FileSplit):
    """Image files, each with its mask file (where none was found, the pattern looked for: a bad sample naming both);
    labels are 0s, the targets being the masks."""

    def __init__(self, paths: list[str], masks: list[str], rule: MaskRule):
        super().__init__(paths, np.zeros(len(paths), np.int64))
        self.masks, self.rule, self.mask_dtype = [str(m) for m in masks], rule, rule.dtype
        if len(self.masks) != len(self.paths):
            raise ValueError(f"{len(self.masks)} masks for {len(self.paths)} images")

    def decode(self, i: int, raw, decode: Decode | None = None) -> tuple[np.ndarray, np.ndarray]:  # type: ignore
        """(image, mask), each at its full size (the augmenter allows no draft with masks)."""
        image = super().decode(i, raw, decode)
        return image, self._mask(i, image.shape[:2], (decode or Decode()).max_pixels)

    def _mask(self, i: int, size: tuple[int, int], max_pixels: int | None) -> np.ndarray:
        path = self.masks[i]
        if path.lower().endswith(".geojson"):
            raise BadSampleError(i, self.describe(i), f"its mask {path} is polygons, read a patch at a time: set "
                                 "data.patches (docs/slides.md), or draw them into a label raster")
        try:
            mask = read_mask(path, max_pixels)
        except FileNotFoundError as exc:
            raise BadSampleError(i, self.describe(i), f"it has no mask: no file {path}") from exc
        except Exception as exc:
            raise BadSampleError(i, self.describe(i), f"its mask {path}: {bad_sample_reason(exc)}") from exc
        if mask.shape != tuple(size):
            raise BadSampleError(i, self.describe(i), f"its mask {path} is {mask.shape[1]}×{mask.shape[0]} "
                                 f"(width×height) where the image is {size[1]}×{size[0]}")
        wrong = check_mask_values(mask, self.rule.classes, self.rule.ignore_index)
        if wrong:
            raise BadSampleError(i, self.describe(i), f"its mask {path}: {wrong}")
        return mask

    def take(self, picked: np.ndarray) -> MaskedFileSplit:
        return MaskedFileSplit([self.paths[i] for i in picked], [self.masks[i] for i in picked], self.rule)
