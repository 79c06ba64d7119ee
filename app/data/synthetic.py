"""The offline default dataset: large JPEGs of one big class shape on a cluttered background.

A class is a shape drawn in a class colour (jittered), at a random position, size and
rotation, over smooth colour fields, mid-frequency noise and smaller random blobs and
lines in any colour. Shape and colour both survive a downscale to 64×64, so a small CNN
learns it in a few epochs, while the files are as large as real photos for the loader.

Files depend only on the generation parameters: image i is drawn from
`np.random.default_rng([seed, i])` and saved with fixed JPEG settings and no metadata.
Never imports TensorFlow, Keras or the loader: worker processes import it.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from tqdm import tqdm

from app.data.folder import folder_source
from app.data.source import Source
from app.errors import DataError

FORMAT_VERSION = 1  # bump when the drawing changes, so old datasets are not reused
JPEG_QUALITY = 90
SHAPES = ("circle", "square", "triangle", "cross", "stripes", "ring", "star", "crescent")
COLOURS = {"red": (220, 40, 40), "green": (40, 190, 60), "blue": (40, 80, 230),
           "yellow": (235, 215, 40), "magenta": (210, 50, 200), "cyan": (40, 210, 215)}
MAX_CLASSES = len(SHAPES) * len(COLOURS)
_TMP_PREFIX = ".tmp-"
# A pool only pays for its start-up (spawn'ed interpreters importing numpy and PIL) when
# there are a few seconds of drawing: about 64 images of 1024².
POOL_MIN_PIXELS = 64 * 1024 * 1024


def class_style(label: int) -> tuple[str, str]:
    """(shape, colour name) of class `label`: each round of 8 shapes shifts the colours by one,
    so neighbouring classes differ in both and no (shape, colour) pair repeats below 48."""
    shape, round_ = label % len(SHAPES), label // len(SHAPES)
    colours = list(COLOURS)
    return SHAPES[shape], colours[(shape + round_) % len(colours)]


def class_names(num_classes: int) -> list[str]:
    if not 2 <= num_classes <= MAX_CLASSES:
        raise DataError(f"data.num_classes={num_classes}: the synthetic dataset has 2 to "
                        f"{MAX_CLASSES} classes ({len(SHAPES)} shapes × {len(COLOURS)} colours).")
    # The number first, so that sorted names (the folder source's label order) keep class order.
    styles = [class_style(c) for c in range(num_classes)]
    return [f"{c:02d}_{colour}_{shape}" for c, (shape, colour) in enumerate(styles)]


def dataset_dir_name(num_images: int, source_size: int, num_classes: int, seed: int) -> str:
    return f"v{FORMAT_VERSION}-n{num_images}-s{source_size}-c{num_classes}-seed{seed}"


@dataclass(frozen=True)
class Spec:
    """What a synthetic dataset is generated from (data.num_images, source_size, num_classes, seed)."""

    num_images: int
    source_size: int
    num_classes: int
    seed: int


def ensure_dataset(root: str | os.PathLike, spec: Spec, progress: bool = True) -> Path:
    """The dataset's folder under `root`, generating it first if it is not there yet.

    Generation writes into a hidden sibling folder renamed into place when complete, so a
    concurrent job sees either nothing or the whole dataset; a job that loses the rename
    race drops its copy and uses the winner's.
    """
    num_images, source_size, num_classes, seed = spec.num_images, spec.source_size, spec.num_classes, spec.seed
    names = class_names(num_classes)
    root = Path(root).expanduser().absolute()
    final = root / dataset_dir_name(num_images, source_size, num_classes, seed)
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(root)
    tmp = root / f"{_TMP_PREFIX}{final.name}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        for name in names:
            (tmp / name).mkdir(parents=True)
        jobs = [(str(tmp / names[i % num_classes] / f"{i:05d}.jpg"), seed, i, source_size,
                 i % num_classes) for i in range(num_images)]
        with tqdm(total=num_images, desc=f"generating {final.name}", unit="img", file=sys.stderr,
                  disable=not progress) as bar:
            _run(jobs, bar)
        try:
            tmp.rename(final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when the rename won
    return final


def synthetic_source(data_cfg) -> Source:
    folder = ensure_dataset(data_cfg.path, Spec(data_cfg.num_images, data_cfg.source_size, data_cfg.num_classes,
                                                data_cfg.seed))
    # the files are a function of the folder's name (FORMAT_VERSION and parameters): their times say nothing
    return folder_source(folder, data_cfg.val_fraction, name="synthetic", times=False)


def _run(jobs: list[tuple], bar: tqdm) -> None:
    pixels = sum(job[3] ** 2 for job in jobs)
    workers = min(os.cpu_count() or 1, len(jobs))
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
    draw_image(np.random.default_rng([seed, index]), size, label).save(
        path, "JPEG", quality=JPEG_QUALITY)


def draw_image(rng: np.random.Generator, size: int, label: int) -> Image.Image:
    """One RGB image of class `label`, `size` pixels square."""
    img = _background(rng, size)
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(6, 14))):  # clutter: smaller blobs and lines, any colour
        _clutter(draw, rng, size)
    shape, colour_name = class_style(label)
    base = np.array(COLOURS[colour_name])
    colour = tuple(int(v) for v in np.clip(base + rng.integers(-25, 26, 3), 0, 255))
    mask = Image.new("L", (size, size), 0)
    _shape(ImageDraw.Draw(mask), rng, size, shape)
    img.paste(colour, (0, 0, size, size), mask)
    return img


def _background(rng: np.random.Generator, size: int) -> Image.Image:
    # Per-pixel noise at 1024² would dominate the cost; upscaling small noise is cheap in C.
    field = Image.fromarray(rng.integers(40, 216, (4, 4, 3), dtype=np.uint8)).resize(
        (size, size), Image.Resampling.BICUBIC)
    grain_side = max(2, size // 16)
    grain = Image.fromarray(rng.integers(0, 256, (grain_side, grain_side, 3), dtype=np.uint8)).resize(
        (size, size), Image.Resampling.BILINEAR)
    return Image.blend(field, grain, 0.25)


def _clutter(draw: ImageDraw.ImageDraw, rng: np.random.Generator, size: int) -> None:
    colour = tuple(int(v) for v in rng.integers(0, 256, 3))
    x, y = rng.uniform(0, size, 2)
    r = size * rng.uniform(0.02, 0.08)
    kind = rng.integers(3)
    if kind == 0:
        draw.ellipse((x - r, y - r, x + r, y + r), fill=colour)
    elif kind == 1:
        draw.rectangle((x - r, y - r / 2, x + r, y + r / 2), fill=colour)
    else:
        x2, y2 = rng.uniform(0, size, 2)
        draw.line((x, y, x2, y2), fill=colour, width=max(1, size // 100))


def _shape(draw: ImageDraw.ImageDraw, rng: np.random.Generator, size: int, shape: str) -> None:
    """Draw `shape` in white on a mask: radius 18–30% of the side, fully inside the image."""
    r = size * rng.uniform(0.18, 0.30)
    cx, cy = rng.uniform(r, size - r, 2)
    angle = rng.uniform(0, 2 * np.pi)

    def poly(points) -> list[tuple[float, float]]:
        # Unit-radius points → rotated, scaled and moved into place.
        p = np.asarray(points, dtype=float)
        c, s = np.cos(angle), np.sin(angle)
        xy = p @ np.array([[c, s], [-s, c]]) * r + (cx, cy)
        return [tuple(v) for v in xy]

    def disc(x: float, y: float, radius: float, fill: int) -> None:
        draw.ellipse((x - radius, y - radius, x + radius, y + radius), fill=fill)

    if shape == "circle":
        disc(cx, cy, r, 255)
    elif shape == "ring":
        disc(cx, cy, r, 255)
        disc(cx, cy, r * 0.6, 0)
    elif shape == "crescent":
        disc(cx, cy, r, 255)
        dx, dy = np.cos(angle) * r * 0.45, np.sin(angle) * r * 0.45
        disc(cx + dx, cy + dy, r * 0.8, 0)
    elif shape == "square":
        draw.polygon(poly([(-0.75, -0.75), (0.75, -0.75), (0.75, 0.75), (-0.75, 0.75)]), fill=255)
    elif shape == "triangle":
        t = np.array([np.pi / 2, np.pi / 2 + 2 * np.pi / 3, np.pi / 2 + 4 * np.pi / 3])
        draw.polygon(poly(np.stack([np.cos(t), np.sin(t)], axis=1)), fill=255)
    elif shape == "cross":
        a, b = 1.0, 0.28
        draw.polygon(poly([(-a, -b), (a, -b), (a, b), (-a, b)]), fill=255)
        draw.polygon(poly([(-b, -a), (b, -a), (b, a), (-b, a)]), fill=255)
    elif shape == "stripes":
        for offset in (-0.8, -0.2, 0.4):
            draw.polygon(poly([(-0.9, offset), (0.9, offset), (0.9, offset + 0.35),
                               (-0.9, offset + 0.35)]), fill=255)
    elif shape == "star":
        t = np.pi / 2 + np.arange(10) * np.pi / 5
        radius = np.where(np.arange(10) % 2 == 0, 1.0, 0.42)
        draw.polygon(poly(np.stack([np.cos(t) * radius, np.sin(t) * radius], axis=1)), fill=255)


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
