"""What a data source hands the loader: splits of file paths (or array rows) and labels, cheap to pickle to workers."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from app.data.pixels.images import Decode, DecodeError, TiffAt, decoded, read_bytes
from app.data.split import Drawn, Split, WholeImages
from app.errors import BadSampleError, DataError
from app.targets import Targets


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


class FileSplit(WholeImages):
    """Samples that are image files, one label (or label vector) each."""

    def __init__(self, paths: list[str], labels):
        self.paths = [str(p) for p in paths]
        self.labels = _labels(labels, len(self.paths))

    def __len__(self) -> int:
        return len(self.paths)

    def read(self, i: int, decode: Decode | None = None, drawn: Drawn | None = None) -> np.ndarray:
        return self.decode(i, self.fetch(i, decode), decode)

    def fetch(self, i: int, decode: Decode | None = None, drawn: Drawn | None = None) -> bytes | TiffAt:
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

    def describe(self, i: int, drawn: Drawn | None = None) -> str:
        return self.paths[i]

    def take(self, picked: np.ndarray) -> FileSplit:
        return FileSplit([self.paths[i] for i in picked], self.labels[picked])

    def files(self) -> list[str]:
        return list(self.paths)

    def nodata(self, i: int) -> float | None:
        from app.data.pixels import tiff  # tifffile waits for a TIFF: as images.py's decode, a worker's imports

        return tiff.nodata_of(self.paths[i])  # a GeoTIFF's GDAL_NODATA

    def largest_decode_bytes(self, decode: Decode) -> tuple[int, int]:
        from app.data.pixels.headers import files_decode_bytes  # imports tifffile: the plan's, never a worker's

        return files_decode_bytes(self.paths, decode)


class ArraySplit(WholeImages):
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

    def fetch(self, i: int, decode: Decode | None = None, drawn: Drawn | None = None) -> np.ndarray:
        return self.read(i)

    def decode(self, i: int, raw: np.ndarray, decode: Decode | None = None) -> np.ndarray:
        return raw  # rows are pixels already

    def read(self, i: int, decode: Decode | None = None, drawn: Drawn | None = None) -> np.ndarray:
        """Row `rows[i]` as an owned array; `decode` does not apply to arrays."""
        row = self.rows[i]
        try:
            if self._array is None:
                self._array = np.load(self.npy_path, mmap_mode="r")
            return np.array(self._array[row], dtype=np.uint8, order="C")
        except Exception as exc:
            raise BadSampleError(i, self.describe(i), bad_sample_reason(exc)) from exc

    def describe(self, i: int, drawn: Drawn | None = None) -> str:
        return f"{self.name} row {self.rows[i]} ({self.npy_path})"

    def take(self, picked: np.ndarray) -> ArraySplit:
        return ArraySplit(self.npy_path, self.rows[picked], self.labels[picked], self.name)

    def largest_decode_bytes(self, decode: Decode) -> tuple[int, int]:
        return int(np.prod(np.load(self.npy_path, mmap_mode="r").shape[1:])), 0  # a row: no decode to shrink it


@dataclass(kw_only=True)
class Source:
    name: str
    class_names: list[str]
    train: Split
    val: Split
    fingerprint: str  # sha256 hex of what identifies the data
    split: dict  # JSON-able; the trainer writes it as split.json
    # files only: the fingerprint of names and sizes alone, as runs before modification times had it
    names_sizes_fingerprint: str | None = None
    # evaluate split=test only; outside the fingerprint, so adding test images never blocks a resume
    test: Split | None = None
    # a table's rows its check left out (data.on_bad_sample=skip): (line or row, where, why)
    left_out: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)
    train_weights: np.ndarray | None = None  # a table's weight column, a training sample each (data.sampling=weights)
    corners: dict = dataclasses.field(default_factory=dict)  # a table's patches: (top, left) a row, by split

    def splits(self) -> dict[str, Split]:  # train, val and (where it has one) test, by name
        return {name: split for name, split in (("train", self.train), ("val", self.val), ("test", self.test))
                if split is not None}


UNTRAINED_FIX = ("give each class readable training images (a prepared copy: prepare it again once they are; its "
                 "bad_samples.txt lists the files left out), or leave the class out of the source")


def check_every_class_trains(source: Source, where: str, *, targets: Targets, unit: str = "sample",
                             fix: str = UNTRAINED_FIX) -> None:
    """A class no training sample shows is refused, whatever the source: the model could never learn it."""
    missing = targets.untrained(np.asarray(source.train.labels), source.class_names)
    if missing:
        raise DataError(f"{where}: class(es) {', '.join(missing)} have no {unit} in the training split, so the model "
                        f"could never learn them: {fix}")


def overfitting(source: Source, samples: int, seed: int) -> Source:
    """`samples` training samples picked by `seed` as both splits (overfit_batches); split["overfit"] lists them."""
    picked = np.sort(np.random.default_rng(seed).permutation(len(source.train))[:samples])
    part = source.train.take(picked)
    weights = None if source.train_weights is None else source.train_weights[picked]
    return dataclasses.replace(source, train=part, val=part, split={**source.split, "overfit": picked.tolist()},
                               train_weights=weights)
