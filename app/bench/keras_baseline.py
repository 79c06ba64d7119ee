"""`bench`'s hand-rolled PyDatasets (Pillow, or slides' regions; float32), alone so Keras's workers import them."""

from __future__ import annotations

import cv2
import keras
import numpy as np
import tifffile
from PIL import Image

from app.data.pixels.label_masks import read_mask
from app.data.source import FileSplit
from app.model import normalise


def read_textbook(split, index: int):
    """A file read as PyDatasets usually do (Pillow, full decode), with its mask (read_mask) where a sample is a pair;
    an array source's or a copy's rows as this loader reads them."""
    if not isinstance(split, FileSplit):
        return split.read(index)
    with Image.open(split.paths[index]) as img:
        image = np.asarray(img.convert("RGB"))
    return image if split.mask_dtype is None else (image, read_mask(split.masks[index], None))


def batched(split, samples: list, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(float32 images, targets) of augmented `samples`: their masks where each is an (image, mask) pair, else the
    split's labels of `indices`."""
    if split.mask_dtype is None:
        return normalise(np.stack(samples)), split.labels[indices]
    images, masks = zip(*samples, strict=True)
    return normalise(np.stack(images)), np.stack(masks)


class KerasBaseline(keras.utils.PyDataset):
    def __init__(self, split, augmenter, batches: np.ndarray, seed: int, **kwargs):
        """`batches` has shape (steps, batch size, 2): each sample's (epoch, index)."""
        super().__init__(**kwargs)  # workers, use_multiprocessing, max_queue_size
        self.split, self.augmenter, self.batches, self.seed = split, augmenter, batches, seed

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int):
        pairs = self.batches[i]
        return batched(self.split, [self.augmenter(read_textbook(self.split, int(k)), self.seed, int(e), int(k))
                                    for e, k in pairs], pairs[:, 1])


class HandRegions(KerasBaseline):
    """The patch reader a pathology user writes: a worker opens each slide once (OpenSlide's read_region, or the level's
    zarr array through tifffile), shrinks between levels, augments, makes float32. `places`: (epoch, index) → (path,
    level, (x, y), (height, width) read, openslide)."""

    def __init__(self, split, augmenter, planned: tuple[np.ndarray, dict], seed: int, **kwargs):
        """`planned`: the batches of (epoch, index) pairs, and `places`."""
        super().__init__(split, augmenter, planned[0], seed, **kwargs)
        self.places, self.size = planned[1], split.size

    def __getitem__(self, i: int):
        pairs = self.batches[i]
        images = np.stack([self.augmenter(self._patch(int(e), int(k)), self.seed, int(e), int(k)) for e, k in pairs])
        return normalise(images), self.split.labels[pairs[:, 1]]

    def _patch(self, epoch: int, index: int) -> np.ndarray:
        path, level, (x, y), (height, width), openslide = self.places[epoch, index]
        if openslide:
            scale = _opened(path, None).level_downsamples[level]
            region = np.asarray(_opened(path, None).read_region((round(x * scale), round(y * scale)), level,
                                                                (width, height)).convert("RGB"))
        else:
            region = np.asarray(_opened(path, level)[y:y + height, x:x + width])
        if region.shape[:2] != self.size:
            region = cv2.resize(region, self.size[::-1], interpolation=cv2.INTER_AREA)
        return region


_SLIDES: dict = {}  # a worker's open slides: (path, level) → OpenSlide, or the level's zarr array


def _opened(path: str, level: int | None):
    if (path, level) not in _SLIDES:
        if level is None:
            import openslide  # noqa: PLC0415 - the slides extra: only a bench of scanners' files needs it

            _SLIDES[path, level] = openslide.OpenSlide(path)
        else:
            import zarr  # noqa: PLC0415 - as app/data/slides/regions.py: only patch benches pay its import

            _SLIDES[path, level] = zarr.open(tifffile.imread(path, aszarr=True, level=level), mode="r")
    return _SLIDES[path, level]
