"""CIFAR-10 from its official archive, converted once into memory-mappable .npy files under `<data.path>/cache/`, its
pickles read by an unpickler that builds only containers and numpy arrays. The test batch is the test split."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import sys
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
from tqdm import tqdm

from app.data.source import ArraySplit, Source
from app.data.sources.folder import split_by_fraction
from app.errors import DataError
from app.io import atomic_write

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
MD5 = "c58f30108f718f92721af3b95e74349a"
ARCHIVE = "cifar-10-python.tar.gz"
FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_BATCHES = ["test_batch"]
META = "batches.meta"
# 3: caches from before label names and pixel values were checked are rebuilt (and so checked).
CACHE_VERSION = 3
# 1: the test batch was the validation split. 2: validation drawn from the training batches.
SPLIT_VERSION = 2


def cifar_source(data_cfg) -> Source:
    root = Path(data_cfg.path).expanduser().absolute()
    found = _find(root)
    if found is None:
        if not data_cfg.download:
            raise not_found(data_cfg)
        found = download(root / ARCHIVE)
    return _load(root / "cache", found, data_cfg.val_fraction)


def is_found(data_cfg) -> bool:
    """Whether CIFAR-10 is where `data_cfg` looks (data.path, Keras's cache): read, never downloaded."""
    return _find(Path(data_cfg.path).expanduser().absolute()) is not None


def not_found(data_cfg) -> DataError:
    root = Path(data_cfg.path).expanduser().absolute()
    return DataError(f"CIFAR-10 not found: looked for {root / FOLDER}/, {root / ARCHIVE} and "
                     f"{Path.home() / '.keras/datasets'}. Put the official archive at {root / ARCHIVE} "
                     f"(or its extracted {FOLDER}/ folder at {root / FOLDER}/); it is at {URL}. "
                     f"Or add data.download=true to fetch it.")


def check_split(recorded: dict, run_dir: Path) -> None:
    """Refuses (DataError) a run trained on another split version of CIFAR-10 (1: validation was the test batch)."""
    version = recorded.get("split_version", 1)
    if version == SPLIT_VERSION:
        return
    raise DataError(f"{run_dir} was trained on CIFAR-10 split version {version}, where the official test "
                    f"batch was the validation split; this version of the app keeps the test batch as the "
                    f"test split and draws validation from the training batches (split version "
                    f"{SPLIT_VERSION}), so the run's samples are not these to resume or evaluate on. Start a "
                    f"new run; its checkpoints still serve `predict`.")


def download(dest: Path) -> Path:
    """Fetch URL to `dest` through a .part file, checked against MD5 before it is renamed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    digest = hashlib.md5()
    try:
        with urllib.request.urlopen(URL, timeout=60) as response, open(part, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=f"downloading {dest.name}",
                      file=sys.stderr) as bar:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, OSError) as exc:
        part.unlink(missing_ok=True)
        raise DataError(f"could not download CIFAR-10 from {URL} to {dest}: {exc}. Download it by "
                        f"hand and put it at {dest}.") from exc
    if digest.hexdigest() != MD5:
        part.unlink()
        raise DataError(f"the CIFAR-10 archive downloaded from {URL} has md5 {digest.hexdigest()}, "
                        f"expected {MD5}: it was deleted. Try again, or download it by hand and put "
                        f"it at {dest}.")
    os.replace(part, dest)
    return dest


def _find(root: Path) -> Path | None:
    keras = Path.home() / ".keras" / "datasets"
    candidates = [root / FOLDER, root / ARCHIVE, keras / FOLDER, keras / f"{FOLDER}-target" / FOLDER]
    return next((c for c in candidates if c.exists()), None)


def _source_key(found: Path) -> str:
    """Identifies the source files cheaply (path, size, mtime), to decide whether the cache is stale."""
    files = [found] if found.is_file() else [found / n for n in (*TRAIN_BATCHES, *TEST_BATCHES, META)]
    stats = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.exists()]
    return hashlib.sha256(json.dumps(stats).encode()).hexdigest()


def _load(cache: Path, found: Path, val_fraction: float) -> Source:
    key = _source_key(found)
    meta_path = cache / "meta.json"
    names = ("train_x", "train_y", "test_x", "test_y")
    meta = None
    if meta_path.is_file() and all((cache / f"{n}.npy").is_file() for n in names):
        with contextlib.suppress(ValueError):
            meta = json.loads(meta_path.read_text())
    if not meta or meta.get("version") != CACHE_VERSION or meta.get("source_key") != key:
        meta = _write_cache(cache, found, key)

    labels, test_y = np.load(cache / "train_y.npy"), np.load(cache / "test_y.npy")
    train_rows, val_rows = _split_rows(labels, val_fraction)
    if not len(val_rows):
        raise DataError(f"data.val_fraction={val_fraction} takes no validation image from CIFAR-10's "
                        f"{len(labels)} training images: give a fraction above 0.")
    fingerprint = meta["fingerprint"]
    batches = str(cache / "train_x.npy")
    train = ArraySplit(batches, train_rows, labels[train_rows], "CIFAR-10 training batches")
    val = ArraySplit(batches, val_rows, labels[val_rows], "CIFAR-10 training batches")
    test = ArraySplit(str(cache / "test_x.npy"), np.arange(len(test_y)), test_y, "CIFAR-10 test batch")
    split = {"source": "cifar", "split_version": SPLIT_VERSION, "fingerprint": fingerprint,
             "fingerprint_covers": "the training batches' images and labels", "class_names": meta["class_names"],
             "root": str(found), "train": train.rows.tolist(), "val": val.rows.tolist(),
             "val_fraction": val_fraction, "test": test.rows.tolist()}
    return Source(name="cifar", class_names=meta["class_names"], train=train, val=val, fingerprint=fingerprint,
                  split=split, test=test)


def _split_rows(labels: np.ndarray, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, validation rows) of the training batches, `val_fraction` of each class."""
    train, val = [], []
    for c in np.unique(labels):
        rows = [(str(r), 0, 0) for r in np.flatnonzero(labels == c)]
        kept, held = split_by_fraction(rows, val_fraction)
        train += [int(r) for r, _, _ in kept]
        val += [int(r) for r, _, _ in held]
    return np.array(sorted(train), dtype=np.int64), np.array(sorted(val), dtype=np.int64)


def _write_cache(cache: Path, found: Path, key: str) -> dict:
    batches = _read_batches(found)
    arrays = {}
    for split, members in (("train", TRAIN_BATCHES), ("test", TEST_BATCHES)):
        data = np.concatenate([_rows(batches[m], found, m) for m in members])
        # Each row is the red plane, then green, then blue, each 32×32 row-major.
        arrays[f"{split}_x"] = np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        arrays[f"{split}_y"] = np.concatenate(
            [np.asarray(batches[m][b"labels"], dtype=np.int64) for m in members])
    class_names = [n.decode() if isinstance(n, bytes) else str(n) for n in batches[META].get(b"label_names") or []]
    # Labels run 0 to 9 (_rows): fewer names leave some unnamed, a repeated one merges two classes' metrics.
    if len(set(class_names)) != 10 or len(class_names) != 10:
        raise DataError(f"{found}: {META}'s label_names are not 10 distinct names ({class_names}). Replace it "
                        f"with the official archive from {URL}.")

    digest = hashlib.sha256(f"cifar split {SPLIT_VERSION}".encode())
    cache.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        if name.startswith("train"):  # the test batch stays outside the fingerprint
            digest.update(f"{name}{array.shape}".encode())
            digest.update(array.data)
        with atomic_write(cache / f"{name}.npy", "wb") as f:
            np.save(f, array)
    for stale in ("val_x.npy", "val_y.npy"):  # cache version 1's copy of the test batch
        (cache / stale).unlink(missing_ok=True)
    meta = {"version": CACHE_VERSION, "source_key": key, "fingerprint": digest.hexdigest(),
            "class_names": class_names}
    # meta.json last: it vouches for the arrays written before it.
    with atomic_write(cache / "meta.json", "wb") as f:
        f.write(json.dumps(meta, indent=1).encode())
    return meta


def _rows(batch: dict, found: Path, member: str) -> np.ndarray:
    data = np.asarray(batch.get(b"data", []))
    labels = np.asarray(batch.get(b"labels", []))
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise DataError(f"{found}: {member} is not a CIFAR-10 batch (data of shape {data.shape}, "
                        f"expected N×3072 with one label a row).")
    outside = np.flatnonzero((labels < 0) | (labels > 9)) if labels.dtype.kind in "iu" else np.arange(len(labels))
    if len(outside):
        raise DataError(f"{found}: {member} is not a CIFAR-10 batch: row {outside[0]} has label "
                        f"{labels[outside[0]].item()!r}, where CIFAR-10's are 0 to 9. Replace it with the official "
                        f"archive from {URL}.")
    return _pixels(data, found, member)


def _pixels(data: np.ndarray, found: Path, member: str) -> np.ndarray:
    """`data` as uint8; a value uint8 cannot hold is named, since the cast would wrap 300 to 44 without a word."""
    if data.dtype == np.uint8:
        return data
    if data.dtype.kind not in "iuf":
        raise DataError(f"{found}: {member} is not a CIFAR-10 batch: its data are {data.dtype} values, where "
                        f"CIFAR-10's are pixels 0 to 255. Replace it with the official archive from {URL}.")
    wrong = np.argwhere((data < 0) | (data > 255) | (data != np.floor(data)))
    if len(wrong):
        row, column = wrong[0]
        raise DataError(f"{found}: {member} is not a CIFAR-10 batch: row {row} holds the value "
                        f"{data[row, column].item()!r}, where CIFAR-10's pixels are 0 to 255. Replace it with the "
                        f"official archive from {URL}.")
    return data.astype(np.uint8)


def _read_batches(found: Path) -> dict[str, dict]:
    wanted = {*TRAIN_BATCHES, *TEST_BATCHES, META}
    batches, reading = {}, found
    try:
        if found.is_dir():
            for name in sorted(wanted & {p.name for p in found.iterdir()}):
                reading = found / name  # a folder's files are named one by one when unreadable
                with open(reading, "rb") as f:
                    batches[name] = _unpickle(f)
        else:
            # One pass through the gzip stream: members are read in archive order.
            with tarfile.open(found, "r:gz") as tar:
                for member in tar:
                    name = Path(member.name).name
                    if member.isfile() and name in wanted and Path(member.name).parent.name == FOLDER:
                        batches[name] = _unpickle(tar.extractfile(member))
    except (OSError, EOFError, tarfile.TarError, pickle.UnpicklingError) as exc:
        what = f"folder with the official {FOLDER}/" if found.is_dir() else f"archive with the official {ARCHIVE}"
        raise DataError(f"cannot read CIFAR-10 from {reading}: {str(exc).rstrip('.')}. Replace the {what} "
                        f"from {URL}.") from exc
    missing = sorted(wanted - set(batches))
    if missing:
        raise DataError(f"{found} is not a complete CIFAR-10 ({FOLDER}/): missing "
                        f"{', '.join(missing)}. Replace it with the official archive from {URL}.")
    return batches


# Besides dicts, lists, bytes and numbers (no globals needed), batches hold numpy arrays.
_PICKLE_GLOBALS = frozenset({
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy._core.numeric", "_frombuffer")})


class _Unpickler(pickle.Unpickler):
    """Builds only what CIFAR-10 batches hold, since the archive may come from anywhere."""

    def find_class(self, module: str, name: str):
        # The official files were written by numpy 1 (numpy.core), numpy 2 calls it numpy._core.
        if module.startswith("numpy.core."):
            module = "numpy._core." + module[len("numpy.core."):]
        if (module, name) not in _PICKLE_GLOBALS:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a CIFAR-10 batch")
        return super().find_class(module, name)


def _unpickle(f: io.BufferedIOBase) -> dict:
    batch = _Unpickler(f, encoding="bytes").load()
    if not isinstance(batch, dict):
        raise pickle.UnpicklingError(f"a batch is a {type(batch).__name__}, not a dict")
    return batch
