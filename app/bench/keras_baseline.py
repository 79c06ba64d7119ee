"""The hand-rolled `keras.utils.PyDataset` that `bench` measures this loader against: decode
and augment in `__getitem__`, float32 out, Keras's own workers and queue. A module of its own
so Keras's worker processes can import it (it imports Keras, as any PyDataset does).

It does what such code does, no more and no less: opens each file with Pillow as the Keras and
albumentations tutorials show (full decode), augments with the same albumentations pipeline,
reseeded per sample as this loader's workers do (the same work a sample), and scales to float32.
Imports Keras (it is the Keras way); never imported by the loader or its workers.
"""

from __future__ import annotations

import keras
import numpy as np
from PIL import Image

from app.data.source import FileSplit
from app.model import normalise


def read_textbook(split, index: int) -> np.ndarray:
    """`np.asarray(Image.open(path).convert("RGB"))`, as a PyDataset is usually written; rows of
    an array source (CIFAR-10) are read as this loader reads them."""
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
