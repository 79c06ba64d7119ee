"""One split of an ImageLoader as Keras takes it (app/library.py): a `keras.utils.PyDataset` whose batch i is the
loader's pass's i-th, Keras's own pool and batch shuffle off."""

from __future__ import annotations

import logging

import keras
import numpy as np

from app import adapters

log = logging.getLogger("app.library")  # the loader's own warnings, under the name users know
PEEKED = 2  # Keras asks for batches 0 and 1 before an epoch (TensorFlow's output signature) and again in it


class SplitDataset(keras.utils.PyDataset):
    """One split as Keras takes it: batch i is the pass's i-th (uint8 images, int64 labels). Keras's own pool and batch
    shuffle are off (the loader does both); the two batches Keras peeks at before an epoch are kept."""

    def __init__(self, owner, name: str, samples: int):  # owner: the ImageLoader it is a split of
        super().__init__(workers=1, use_multiprocessing=False)
        self.owner, self.name, self.samples = owner, name, samples
        self.epoch = 0
        batch = owner.settings.batch_size
        self._batches = samples // batch if name == "train" else -(-samples // batch)
        self._kept: dict[int, tuple] = {}  # batch index → the batch, for Keras's look before the epoch
        self._in_epoch = self._served_last = self._told = False

    def __len__(self) -> int:
        return self._batches

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of the {self.name} split, which has {len(self)}")
        with self.owner.lock:
            batch = self._kept.get(index)
            if batch is None:
                batch = self.owner.batch(self.name, self.epoch, index)
                self._kept = {i: b for i, b in self._kept.items() if i < index} if index < PEEKED else {}
                if index < PEEKED:
                    self._kept[index] = batch
            # TensorFlow's look comes before on_epoch_begin: serving the last batch then ends no pass
            self._served_last = self._served_last or (self._in_epoch and index == len(self) - 1)
            return batch

    def on_epoch_begin(self) -> None:
        self._in_epoch = True
        if adapters.keras_batch_shuffle_switched_off(self) and not self._told:
            self._told = True
            log.warning("fit(shuffle=True), Keras's default, would ask for the %s split's batches in a random order; "
                        "switched off: the loader already shuffles the samples by its seed each epoch, and builds "
                        "its batches in order. fit(..., shuffle=False) says the same without this message.", self.name)

    def on_epoch_end(self) -> None:
        """The pass turns once its last batch was served (a shorter Keras epoch goes on where it stopped)."""
        with self.owner.lock:
            self._in_epoch = False
            if self._served_last:
                self.epoch += 1
                self._kept, self._served_last = {}, False

    @property
    def workers(self) -> int:
        return 1

    @workers.setter
    def workers(self, value: int) -> None:
        refuse_keras_pool("workers", value, 1)

    @property
    def use_multiprocessing(self) -> bool:
        return False

    @use_multiprocessing.setter
    def use_multiprocessing(self, value: bool) -> None:
        refuse_keras_pool("use_multiprocessing", value, False)


def refuse_keras_pool(name: str, value, off) -> None:
    if value != off:
        raise ValueError(f"{name}={value!r}: Keras's own pool stays off for the loader's splits (its worker "
                         "processes do the work); set the loader's workers= and max_size= instead")
