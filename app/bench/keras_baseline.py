"""`bench`'s hand-rolled PyDataset baseline (Pillow, same augmentation, float32), alone so Keras's workers import it."""

from __future__ import annotations

import keras
import numpy as np
from PIL import Image

from app.data.source import FileSplit
from app.model import normalise


def read_textbook(split, index: int) -> np.ndarray:
    """A file read as PyDatasets usually do (Pillow, full decode); an array source's rows as this loader reads them."""
    if isinstance(split, FileSplit):
        with Image.open(split.paths[index]) as img:
            return np.asarray(img.convert("RGB"))
    return split.read(index)


class KerasBaseline(keras.utils.PyDataset):
    def __init__(self, split, augmenter, batches: np.ndarray, seed: int, **kwargs):
        """`batches` has shape (steps, batch size, 2): each sample's (epoch, index)."""
        super().__init__(**kwargs)  # workers, use_multiprocessing, max_queue_size
        self.split, self.augmenter, self.batches, self.seed = split, augmenter, batches, seed

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int):
        pairs = self.batches[i]
        images = np.stack([self.augmenter(read_textbook(self.split, int(k)), self.seed, int(e), int(k))
                           for e, k in pairs])
        return normalise(images), self.split.labels[pairs[:, 1]]
