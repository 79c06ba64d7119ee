"""What a data source hands the loader: splits of file paths (or array rows) and labels, cheap to pickle to workers."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from app.data.images import Decode, DecodeError, TiffAt, decoded, read_bytes
from app.errors import BadSampleError, DataError


def bad_sample_reason(exc: BaseException) -> str:
    if isinstance(exc, DecodeError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}"


def _labels(labels, n: int) -> np.ndarray:
    """One integer a sample, or (data.task=multilabel, a 2-D array given) one 0/1 uint8 row a sample."""
    given = np.asarray(labels)
    out = given.astype(np.uint8) if given.ndim == 2 else given.astype(np.int64).reshape(-1)
    if len(out) != n:
        raise ValueError(f"{len(out)} labels for {n} samples")
    return out


class FileSplit:
    """Samples that are image files, one label (or label vector) each."""

    def __init__(self, paths: list[str], labels):
        self.paths = [str(p) for p in paths]
        self.labels = _labels(labels, len(self.paths))

    def __len__(self) -> int:
        return len(self.paths)

    def read(self, i: int, decode: Decode | None = None) -> np.ndarray:
        return self.decode(i, self.fetch(i, decode), decode)

    def fetch(self, i: int, decode: Decode | None = None) -> bytes | TiffAt:
        """Sample i's bytes (a TIFF's tiles are read by its decode); BadSampleError if unreadable or too large."""
        path = self.paths[i]  # an IndexError stays an IndexError
        try:
            return read_bytes(path, (decode or Decode()).max_pixels)
        except Exception as exc:
            raise BadSampleError(i, self.describe(i), bad_sample_reason(exc)) from exc

    def decode(self, i: int, raw: bytes | TiffAt, decode: Decode | None = None) -> np.ndarray:
        try:
            return decoded(raw, decode or Decode())
        except Exception as exc:
            raise BadSampleError(i, self.describe(i), bad_sample_reason(exc)) from exc

    def describe(self, i: int) -> str:
        return self.paths[i]


class ArraySplit:
    """Samples that are rows of a uint8 N×H×W×3 .npy file."""

    def __init__(self, npy_path: str, rows, labels, name: str):
        self.npy_path = str(npy_path)
        self.rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        self.labels = _labels(labels, len(self.rows))
        self.name = name
        self._array: np.ndarray | None = None

    def __getstate__(self) -> dict:
        # Each process maps the file itself; pickling the memmap would copy the whole array.
        return {**self.__dict__, "_array": None}

    def __len__(self) -> int:
        return len(self.rows)

    def fetch(self, i: int, decode: Decode | None = None) -> np.ndarray:
        return self.read(i)

    def decode(self, i: int, raw: np.ndarray, decode: Decode | None = None) -> np.ndarray:
        return raw  # rows are pixels already

    def read(self, i: int, decode: Decode | None = None) -> np.ndarray:
        """Row `rows[i]` as an owned array; `decode` does not apply to arrays."""
        row = self.rows[i]
        try:
            if self._array is None:
                self._array = np.load(self.npy_path, mmap_mode="r")
            return np.array(self._array[row], dtype=np.uint8, order="C")
        except Exception as exc:
            raise BadSampleError(i, self.describe(i), bad_sample_reason(exc)) from exc

    def describe(self, i: int) -> str:
        return f"{self.name} row {self.rows[i]} ({self.npy_path})"


@dataclass(kw_only=True)
class Source:
    name: str
    class_names: list[str]
    train: FileSplit | ArraySplit
    val: FileSplit | ArraySplit
    fingerprint: str  # sha256 hex of what identifies the data
    split: dict  # JSON-able; the trainer writes it as split.json
    # files only: the fingerprint of names and sizes alone, as runs before modification times had it
    names_sizes_fingerprint: str | None = None
    # evaluate split=test only; outside the fingerprint, so adding test images never blocks a resume
    test: FileSplit | ArraySplit | None = None
    # a table's rows its check left out (data.on_bad_sample=skip): (line or row, where, why)
    left_out: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)
    train_weights: np.ndarray | None = None  # a table's weight column, a training sample each (data.sampling=weights)
    corners: dict = dataclasses.field(default_factory=dict)  # a table's patches: (top, left) a row, by split


UNTRAINED_FIX = ("give each class readable training images (a prepared copy: prepare it again once they are; its "
                 "bad_samples.txt lists the files left out), or leave the class out of the source")


def untrained_classes(source: Source) -> list[str]:
    """The classes the source names that no training sample shows (one label, or a 0/1 vector, a sample)."""
    labels = np.asarray(source.train.labels)
    shown = labels.any(axis=0) if labels.ndim == 2 else np.bincount(labels, minlength=len(source.class_names)) > 0
    return [name for name, seen in zip(source.class_names, shown, strict=False) if not seen]


def check_every_class_trains(source: Source, where: str, *, unit: str = "sample", fix: str = UNTRAINED_FIX) -> None:
    """A class no training sample shows is refused, whatever the source: the model could never learn it."""
    missing = untrained_classes(source)
    if missing:
        raise DataError(f"{where}: class(es) {', '.join(missing)} have no {unit} in the training split, so the model "
                        f"could never learn them: {fix}")


def fetch_drawn(split, i: int, decode: Decode | None, drawn: tuple[int, int, int]):
    """Sample i's raw data: `drawn` (seed, epoch, draw) reaches a PatchSplit; any other split takes (i, decode)."""
    return split.fetch(i, decode, drawn) if hasattr(split, "layouts") else split.fetch(i, decode)


def read_drawn(split, i: int, decode: Decode | None, drawn: tuple[int, int, int]) -> np.ndarray:
    """Sample i read and decoded, as `fetch_drawn` passes `drawn`."""
    return split.read(i, decode, drawn) if hasattr(split, "layouts") else split.read(i, decode)


def subset(split: FileSplit | ArraySplit, picked: np.ndarray) -> FileSplit | ArraySplit:
    """The samples `picked` (indices into `split`) as a split of their own."""
    if isinstance(split, FileSplit):
        return FileSplit([split.paths[i] for i in picked], split.labels[picked])
    if hasattr(split, "take"):  # a prepared copy's (app/data/prepared.py, which imports this module)
        return split.take(picked)
    return ArraySplit(split.npy_path, split.rows[picked], split.labels[picked], split.name)


def overfitting(source: Source, samples: int, seed: int) -> Source:
    """`samples` training samples picked by `seed` as both splits (overfit_batches); split["overfit"] lists them."""
    picked = np.sort(np.random.default_rng(seed).permutation(len(source.train))[:samples])
    part = subset(source.train, picked)
    weights = None if source.train_weights is None else source.train_weights[picked]
    return dataclasses.replace(source, train=part, val=part, split={**source.split, "overfit": picked.tolist()},
                               train_weights=weights)
