"""The offline default dataset: photo-like JPEGs (drawing.py) saved as cameras save them, generated in a pool into a
folder renamed when whole, named by GENERATOR_VERSION and the parameters, on which alone its files depend."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
import shutil
import socket
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from app.data.source import Source
from app.data.sources.drawing import COLOURS, SHAPES, class_style, draw_image
from app.data.sources.folder import Held, folder_source
from app.errors import DataError, MachineError

# In the dataset's folder name: bumped when the drawing changes, so old datasets are not reused
# and runs trained on them are not resumed on new files.
GENERATOR_VERSION = 2
JPEG_QUALITY = 90
ORIENTATIONS = (1, 1, 1, 3, 6, 8)  # EXIF orientation tags: half the files are stored turned
_ORIENTATION_TAG = 0x0112
_STORED_AS = {3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270}
PROGRESSIVE_SHARE = 0.4  # files saved progressive, as photos exported for the web often are
MAX_CLASSES = len(SHAPES) * len(COLOURS)
_TMP_PREFIX = ".tmp-"
# A pool only pays for its start-up (spawn'ed interpreters importing numpy and PIL) when
# there are a few seconds of drawing: about 64 images of 1024².
POOL_MIN_PIXELS = 64 * 1024 * 1024
# The least a generated file takes: its headers, and 0.1 byte a pixel (measured: 0.17 at 1024²,
# more at smaller sizes), so a dataset refused for its size would not have fit.
_LEAST_FILE_BYTES, _LEAST_BYTES_A_PIXEL = 600, 0.1


def class_names(num_classes: int) -> list[str]:
    if not 2 <= num_classes <= MAX_CLASSES:
        raise DataError(f"data.num_classes={num_classes}: the synthetic dataset has 2 to "
                        f"{MAX_CLASSES} classes ({len(SHAPES)} shapes × {len(COLOURS)} colours).")
    # The number first, so that sorted names (the folder source's label order) keep class order.
    styles = [class_style(c) for c in range(num_classes)]
    return [f"{c:02d}_{colour}_{shape}" for c, (shape, colour) in enumerate(styles)]


def dataset_dir_name(num_images: int, source_size: int, num_classes: int, seed: int) -> str:
    return f"v{GENERATOR_VERSION}-n{num_images}-s{source_size}-c{num_classes}-seed{seed}"


@dataclass(frozen=True, kw_only=True)
class Spec:
    """What a synthetic dataset is generated from (data.num_images, source_size, num_classes, seed)."""

    num_images: int
    source_size: int
    num_classes: int
    seed: int
    first: int = 0  # the first image's index: a test set continues after the training images

    def folder_name(self) -> str:
        name = dataset_dir_name(self.num_images if not self.first else self.first, self.source_size,
                                self.num_classes, self.seed)
        return f"{name}-test{self.num_images}" if self.first else name


def ensure_dataset(root: str | os.PathLike, spec: Spec, progress: bool = True) -> Path:
    """The dataset's folder under `root`, made if missing in a sibling renamed when whole: jobs see all or none."""
    num_images, source_size, num_classes, seed = spec.num_images, spec.source_size, spec.num_classes, spec.seed
    names = class_names(num_classes)
    root = Path(root).expanduser().absolute()
    final = root / spec.folder_name()
    if final.is_dir():
        return final
    _check_disk_room(root, spec)
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(root)
    tmp = root / f"{_TMP_PREFIX}{final.name}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        for name in names:
            (tmp / name).mkdir(parents=True)
        # a generator: a list of every image's job would hold them all in memory at once
        jobs = ((str(tmp / names[i % num_classes] / f"{i:05d}.jpg"), seed, i, source_size,
                 i % num_classes) for i in range(spec.first, spec.first + num_images))
        with tqdm(total=num_images, desc=f"generating {final.name}", unit="img", file=sys.stderr,
                  disable=not progress) as bar:
            _write_images(jobs, num_images, source_size, bar)
        try:
            tmp.rename(final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when the rename won
    return final


def check_generator(recorded_root: str, run_dir: Path) -> None:
    """Refuses (DataError), before any generating, a run trained on another generator's files: not its samples."""
    match = re.match(r"v(\d+)-", Path(recorded_root).name)
    if match and int(match.group(1)) == GENERATOR_VERSION:
        return
    version = f"v{match.group(1)}" if match else "an unknown version"
    raise DataError(f"{run_dir} was trained on synthetic images of generator {version} ({recorded_root}); "
                    f"this version of the app generates v{GENERATOR_VERSION} (photo-like images, in a folder of "
                    "their own), so the run's samples are not there to resume or evaluate on. Start a new run; "
                    "its checkpoints still serve `predict`.")


def specs(data_cfg) -> list[Spec]:
    """The datasets `data_cfg` reads: the training images', then the test split's if it has one."""
    spec = Spec(num_images=data_cfg.num_images, source_size=data_cfg.source_size, num_classes=data_cfg.num_classes,
                seed=data_cfg.seed)
    tests = data_cfg.num_test_images
    tests = max(data_cfg.num_classes, data_cfg.num_images // 4) if tests is None else tests
    return [spec, dataclasses.replace(spec, num_images=tests, first=spec.num_images)] if tests \
        else [spec]


def synthetic_source(data_cfg) -> Source:
    """The dataset and its test split: `data.num_test_images` more (null: a quarter, at least one a class), drawn after
    the training images' indices into a folder of their own, so the training split and its fingerprint are unchanged."""
    spec, *tests = specs(data_cfg)
    root = Path(data_cfg.path).expanduser().absolute()
    for each in (spec, *tests):  # both before either is generated: a refusal leaves nothing written
        if not (root / each.folder_name()).is_dir():
            _check_disk_room(root, each)
    folder = ensure_dataset(data_cfg.path, spec)
    test = ensure_dataset(data_cfg.path, tests[0]) if tests else None
    # the files are a function of the folder's name (GENERATOR_VERSION and parameters): their times say nothing
    return folder_source(folder, data_cfg.val_fraction, name="synthetic", times=False, test=Held(test))


def _check_disk_room(root: Path, spec: Spec) -> None:
    """Refuses, before anything is written, a dataset that cannot fit the disk's free space."""
    least = spec.num_images * (_LEAST_FILE_BYTES + _LEAST_BYTES_A_PIXEL * spec.source_size ** 2)
    free = shutil.disk_usage(_existing(root)).free
    if least > free:
        key = "data.num_test_images" if spec.first else "data.num_images"
        raise MachineError(
            f"{key}={spec.num_images} synthetic images of data.source_size={spec.source_size} take at least "
            f"{least / 2**30:,.1f} GiB, and the disk holding {root} has {free / 2**30:,.1f} GiB free: lower {key} "
            "or data.source_size, or set data.path to a folder on a disk with room. Nothing was written.")


def _existing(path: Path) -> Path:
    """`path`, or its nearest folder that exists (the one whose disk a new folder would be on)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _write_images(jobs, count: int, source_size: int, bar: tqdm) -> None:
    """Each job's image written: here for a small dataset, else by a pool of spawned processes."""
    pixels = count * source_size ** 2
    workers = min(os.cpu_count() or 1, count)
    if workers < 2 or pixels < POOL_MIN_PIXELS:
        for job in jobs:
            _write_image(job)
            bar.update()
        return
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for _ in pool.imap_unordered(_write_image, jobs, chunksize=4):
            bar.update()


def _write_image(job: tuple) -> None:
    path, seed, index, size, label = job
    rng = np.random.default_rng([seed, index])
    img = draw_image(rng, size, label)
    orientation = int(rng.choice(ORIENTATIONS))
    exif = Image.Exif()
    if orientation != 1:
        # Stored turned the other way, so that a viewer (and the loader) honouring the tag shows `img`.
        img = img.transpose(_STORED_AS[orientation])
        exif[_ORIENTATION_TAG] = orientation
    # Full-resolution colour (4:4:4), as cameras and editors save at high quality.
    img.save(path, "JPEG", quality=JPEG_QUALITY, subsampling=0, progressive=bool(rng.random() < PROGRESSIVE_SHARE),
             exif=exif)


def _remove_stale_tmp(root: Path) -> None:
    """Remove half-written datasets whose generating process on this host has died."""
    host = socket.gethostname()
    for entry in root.glob(f"{_TMP_PREFIX}*"):
        parts = entry.name.rsplit("-", 2)  # [.tmp-<dataset>-<host>, <pid>, <random>]
        if len(parts) != 3 or not parts[0].endswith(f"-{host}") or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except PermissionError:
            pass  # alive, owned by someone else
