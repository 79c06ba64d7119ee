"""The hand-rolled `keras.utils.PyDataset` that `bench` measures this loader against: decode
and augment in `__getitem__`, float32 out, Keras's own workers and queue. A module of its own
so Keras's worker processes can import it (it imports Keras, as any PyDataset does)."""

from __future__ import annotations

import keras
import numpy as np

from app.loader.boundary import normalise
from app.loader.worker import make_sample


class KerasBaseline(keras.utils.PyDataset):
    def __init__(self, split, augmenter, order: np.ndarray, batch_size: int, seed: int, **kwargs):
        super().__init__(**kwargs)  # workers, use_multiprocessing, max_queue_size
        self.split, self.augmenter, self.order = split, augmenter, order
        self.batch_size, self.seed = batch_size, seed

    def __len__(self) -> int:
        return len(self.order) // self.batch_size

    def __getitem__(self, i: int):
        pairs = self.order[i * self.batch_size:(i + 1) * self.batch_size]  # (epoch, sample index)
        images = np.stack([make_sample(self.split, self.augmenter, int(k), self.seed, int(e)) for e, k in pairs])
        return normalise(images), self.split.labels[pairs[:, 1]]
