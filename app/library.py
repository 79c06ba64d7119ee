"""The loader as a library for the user's Keras script (docs/library.md): `ImageLoader` hands each split to Keras as a
`keras.utils.PyDataset` of uint8 batches from the `Loader` every command holds; `boundary`: the model's first layer."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import albumentations as A
import keras
import numpy as np

from app.augment import Augmenter, PairAugmenter
from app.data.pixels.pixels import pixels_of
from app.data.source import FileSplit
from app.data.sources.folder import folder_source
from app.data.sources.masked_folder import masked_folder_source
from app.data.sources.table import table_source
from app.data.split import Split
from app.errors import ConfigError
from app.library_splits import SplitDataset
from app.loader.bad_samples import LIBRARY
from app.loader.enqueuer import Enqueuer
from app.loader.order import epoch_order, full_batches
from app.loader.pipeline import Loader
from app.loader.settings import Queue, Settings
from app.model import normaliser
from app.rules import data as data_rules
from app.schema import FolderDataConfig, OnBadSample, TableColumns, TableDataConfig, Task

__all__ = ["ImageLoader", "LoaderSettings", "SplitDataset", "boundary"]
log = logging.getLogger(__name__)
# ImageLoader.from_table's, as data.* has them (task=multilabel: a 0/1 uint8 label vector a sample)
TABLE_OPTIONS = ("root", "path_format", "classes", "test_fraction", "task", "label_separator", "none_label",
                 "uncertain", "ignore_index")
POLICIES = ("raise", "skip", "mark")
QUEUE_KEYS = ("workers", "max_size", "use_multiprocessing", "timeout_s")  # ImageLoader's of the Queue's keys


def boundary(normalisation: str | dict = "unit", dtype: str = "uint8") -> keras.layers.Layer:
    """The integer → float32 first layer, run on the device inside the step: "unit" (÷ `dtype`'s largest value), "tf"
    ([-1, 1]), "torch" or "caffe" (ImageNet's means), "none", or {"mean": [...], "std": [...]} a band, in its units."""
    return normaliser(normalisation, dtype)


@dataclass(frozen=True, kw_only=True)
class LoaderSettings:
    """How an ImageLoader batches: `transforms` (train's), `eval_transforms` (val's, test's), each then resized to
    `image_size`; `on_bad_sample`: raise, skip (up to `max_bad_fraction` of a split) or mark (zeros; see `failed()`)."""

    image_size: Sequence[int]
    batch_size: int
    transforms: A.BaseCompose | None = None
    eval_transforms: A.BaseCompose | None = None
    queue: Queue = Queue()  # the loader's, from ImageLoader's workers=, max_size=, use_multiprocessing=, timeout_s=
    seed: int = 0
    on_bad_sample: str = "raise"
    max_bad_fraction: float = 0.0
    channels: str | Sequence[int] = "rgb"  # as data.channels: rgb, all, or band indices
    dtype: str = "uint8"  # as data.dtype: uint8 or uint16

    def __post_init__(self) -> None:
        # ImageLoader's own check, not the data group's: its policies add `mark` (evaluate's) to data.on_bad_sample's
        if self.on_bad_sample not in POLICIES:
            raise ValueError(f"on_bad_sample={self.on_bad_sample!r}: one of {', '.join(POLICIES)}")

    @classmethod
    def of(cls, **settings) -> LoaderSettings:
        # QUEUE_KEYS make its Queue, as given: not the queue rules, which cap workers by the machine (no worker_limit)
        return cls(queue=Queue(**{key: settings.pop(key) for key in QUEUE_KEYS if key in settings}), **settings)

    def enqueuer(self, splits: dict) -> Enqueuer:
        """The loader's enqueuer over `splits` (name → split): training's transforms for train."""
        size, first = tuple(int(s) for s in self.image_size), next(iter(splits.values()))
        pixels, kind = pixels_of(self.channels, self.dtype, split=first), _augmenter_of(first)
        augmenters = {name: kind((self.transforms if name == "train" else self.eval_transforms) or [], size,
                                 pixels=pixels) for name in splits}
        settings = Settings(batch_size=self.batch_size, image_size=size, queue=self.queue, pixels=pixels,
                            max_bad_fraction=self.max_bad_fraction, policy_names=LIBRARY, mask_dtype=first.mask_dtype)
        return Enqueuer(splits, augmenters, settings, seed=self.seed, on_bad_sample=self.on_bad_sample)


class ImageLoader:
    """Workers that read, decode and augment images into a shared-memory ring for `model.fit(loader.train, ...)`, run
    by `with`. `train`: shuffled by `seed` each epoch, full batches; `val` and `test`: in order, last batch short."""

    def __init__(self, *, train=None, val=None, test=None, class_names: Sequence[str] | None = None, **settings):
        """Splits: (paths, labels) or an app.data split, one at least; `settings`: LoaderSettings's keys."""
        self.settings = LoaderSettings.of(**settings)
        splits = {name: _split(name, given) for name, given in (("train", train), ("val", val), ("test", test))
                  if given is not None}
        if not splits:
            raise ValueError("ImageLoader needs at least one split: train=, val= or test= (paths, labels)")
        self.loader = Loader(self.settings.enqueuer(splits))
        self.class_names = list(class_names) if class_names is not None else None
        self.lock = threading.RLock()  # TensorFlow asks for batches from tf.data's own threads
        self._stream: _Stream | None = None
        self._running: contextlib.ExitStack | None = None
        self.datasets = {name: SplitDataset(self, name, len(split)) for name, split in splits.items()}

    @classmethod
    def from_folder(cls, path: str | Path, *, val_fraction: float = 0.1, masks: str | Path | None = None,
                    **settings) -> ImageLoader:
        """A folder as `data=folder` reads it (docs/data.md); `val_fraction` of each class held out without val/;
        `masks`: each image's mask there (segmentation, docs/segmentation.md), with `classes=`, `ignore_index=`."""
        if masks is None:
            source = folder_source(path, val_fraction)
        else:
            named = {key: settings.pop(key, None) for key in ("classes", "ignore_index")}
            source = masked_folder_source(FolderDataConfig(path=str(path), masks=str(masks), task=Task.segmentation,
                                                           val_fraction=val_fraction, **named))
        return cls(train=source.train, val=source.val, test=source.test, class_names=source.class_names, **settings)

    @classmethod
    def from_table(cls, table: str | Path, *, columns: dict | None = None, val_fraction: float = 0.1,
                   **options) -> ImageLoader:
        """A table as `data=table` reads it (docs/data.md): `columns` maps path, label, split and group to its own
        names; the other data.* keys as there; the rest of `options` are ImageLoader's."""
        own = {key: options.pop(key) for key in TABLE_OPTIONS if key in options}
        if "task" in own:
            own["task"] = Task(own["task"])
        skip = options.get("on_bad_sample") == "skip"  # a table's row faults follow the loader's policy
        data = TableDataConfig(table=str(table), columns=TableColumns(**(columns or {})), val_fraction=val_fraction,
                               on_bad_sample=OnBadSample["skip" if skip else "raise"],
                               max_bad_fraction=options.get("max_bad_fraction", 0.0), **own)
        _check_table(data)
        source = table_source(data)
        return cls(train=source.train, val=source.val, test=source.test, class_names=source.class_names, **options)

    def __enter__(self) -> ImageLoader:
        with contextlib.ExitStack() as running:
            running.enter_context(self.loader)
            self._running = running.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        with self.lock:
            self._close_stream()
            running, self._running = self._running, None
            if running is not None:
                running.close()  # every worker stopped, the ring freed

    @property
    def train(self) -> SplitDataset:
        return self._dataset("train")

    @property
    def val(self) -> SplitDataset:
        return self._dataset("val")

    @property
    def test(self) -> SplitDataset:
        return self._dataset("test")

    def failed(self, split: str) -> dict[int, str]:
        """Position in the split → error, of each sample `mark` put zeros in place of."""
        return self.loader.failed(split)

    @property
    def skipped(self) -> int:
        return self.loader.skipped

    @property
    def restarts(self) -> int:
        """Worker processes replaced (one died: the OOM killer, say)."""
        return self.loader.restarts

    def _dataset(self, name: str) -> SplitDataset:
        if name not in self.datasets:
            raise KeyError(f"this ImageLoader has no {name} split: give {name}=(paths, labels) when building it")
        return self.datasets[name]

    def batch(self, name: str, epoch: int, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch `index` of split `name`'s pass `epoch` (one pass runs at a time); RuntimeError outside `with`."""
        with self.lock:
            if self._running is None:
                raise RuntimeError("the ImageLoader is not started: use it inside `with loader:` "
                                   "(which also stops its worker processes and frees its shared memory)")
            stream = self._stream
            if stream is None or (stream.name, stream.epoch, stream.next) != (name, epoch, index):
                self._close_stream()
                stream = self._stream = _Stream(self, name, epoch, index)
            return stream.take()

    def order(self, name: str, epoch: int) -> np.ndarray:
        """The samples of split `name`'s pass `epoch`, in order."""
        size, seed = self.datasets[name].samples, self.settings.seed
        if name == "train":
            return full_batches(epoch_order(size, seed=seed, epoch=epoch, shuffle=True), self.settings.batch_size)
        return epoch_order(size, seed=seed, epoch=epoch, shuffle=False)

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


class _Stream:
    """One running pass of the loader over a split, from batch `next` on."""

    def __init__(self, owner: ImageLoader, name: str, epoch: int, start: int):
        self.name, self.epoch, self.next = name, epoch, start
        order = owner.order(name, epoch)[start * owner.settings.batch_size:]
        self._batches = owner.loader.batches(name, order, epoch)

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        images, labels = next(self._batches)
        self.next += 1
        return images, labels

    def close(self) -> None:
        self._batches.close()  # what is in flight is drained; the workers stay


def _check_table(data: TableDataConfig) -> None:
    try:  # the data group's own rules (app/rules/data.py), a refusal said in from_table's keyword arguments
        data_rules.check(data)
    except ConfigError as error:
        fractions = error.key in ("data.val_fraction", "data.test_fraction")  # one rule of the two: both named
        named = f"val_fraction={data.val_fraction} and test_fraction={data.test_fraction}" if fractions else \
            f"{error.key.removeprefix('data.')}={error.value!r}"
        raise ValueError(f"{named}: {error.allowed}") from None


def _augmenter_of(split) -> type[Augmenter]:
    """Pairs where the split's samples are (image, mask) (its kind's decision), images otherwise."""
    return Augmenter if split.mask_dtype is None else PairAugmenter


def _split(name: str, given):
    """A split of app.data as it is, or (paths, labels) as a FileSplit."""
    if isinstance(given, Split):
        return given
    try:
        paths, labels = given
    except (TypeError, ValueError):
        raise ValueError(f"{name}= takes (paths, labels): a list of image paths and one integer label each") from None
    return FileSplit(list(paths), labels)
