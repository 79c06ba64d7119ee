"""Small segmentation datasets for the tests, deterministic from a seed (NumPy, Pillow and tifffile alone).

`write_texture_folder`: RGB PNGs whose classes differ by texture alone (one mean colour: fine noise, stripes, a
checker), palette-PNG masks whose palette colours are not their indices, an ignore band (255) along some borders.
`write_raster_set`: 6-band uint16 TIFF tiles whose classes differ by band and texture, uint8 TIFF label rasters with
255 for no data, and a table.csv of them. `shuffle_masks=True` writes the same images, each with another image's mask
(the negative control: nothing to learn)."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tifffile
from PIL import Image, ImageDraw

TEXTURE_CLASSES = ["background", "stroma", "tumour"]
RASTER_CLASSES = ["water", "field", "forest"]
IGNORE = 255
MEAN_RGB = np.array([150.0, 120.0, 140.0])  # every class's mean colour: only the texture tells them apart
# A palette whose colours are not the indices (index 1 is red, not grey 1): a reader must take the indices.
PALETTE = {0: (30, 30, 30), 1: (220, 40, 40), 2: (40, 200, 70), IGNORE: (255, 255, 255)}
# Each class's mean per band (raster), like water, a crop and a forest in visible, NIR and SWIR bands.
BAND_MEANS = np.array([[600, 500, 300, 150, 100, 80], [500, 700, 600, 2500, 1800, 1000],
                       [300, 500, 350, 3000, 1400, 700]], np.float64)


@dataclass
class SegmentationSet:
    """What a generator wrote: (image, mask, split) a sample (split None in the flat layout), paths absolute."""

    root: Path
    class_names: list[str]
    samples: list[tuple[Path, Path, str | None]] = field(default_factory=list)
    table: Path | None = None  # write_raster_set's CSV

    def of(self, split: str | None) -> list[tuple[Path, Path]]:
        return [(image, mask) for image, mask, at in self.samples if at == split]


def label_map(size: int, rng: np.random.Generator, *, base: int = 0, classes: int = 3) -> np.ndarray:
    """A `size`² uint8 map of `base` with ellipses and rectangles (a few hundred pixels each) of every other class."""
    others = [c for c in range(classes) if c != base]
    drawn = others + [int(c) for c in rng.choice(others, int(rng.integers(1, 3)))]
    img = Image.new("L", (size, size), base)
    draw = ImageDraw.Draw(img)
    for label in drawn:
        half = rng.integers(size // 10, size // 5, 2, endpoint=True)
        cx, cy = (int(v) for v in rng.integers(half.max(), size - half.max(), 2))
        box = (cx - int(half[0]), cy - int(half[1]), cx + int(half[0]), cy + int(half[1]))
        (draw.ellipse if rng.random() < 0.6 else draw.rectangle)(box, fill=label)
    return np.array(img)


def ignore_band(labels: np.ndarray, label: int, width: int = 2) -> np.ndarray:
    """`labels` with IGNORE on a `width`-pixel band straddling the border of class `label`'s regions."""
    inside = labels == label
    outer, inner = _grown(inside, (width + 1) // 2), ~_grown(~inside, width // 2)
    marked = labels.copy()
    marked[outer & ~inner] = IGNORE
    return marked


def _grown(region: np.ndarray, steps: int) -> np.ndarray:
    """`region` dilated `steps` pixels (4-neighbours), by shifts."""
    grown = region.copy()
    for _ in range(steps):
        step = grown.copy()
        step[1:] |= grown[:-1]
        step[:-1] |= grown[1:]
        step[:, 1:] |= grown[:, :-1]
        step[:, :-1] |= grown[:, 1:]
        grown = step
    return grown


def texture_image(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """RGB uint8: class 0 fine noise about MEAN_RGB, class 1 stripes, class 2 a checker, of one mean colour."""
    yy, xx = np.mgrid[0:labels.shape[0], 0:labels.shape[1]]
    across = yy if rng.random() < 0.5 else xx
    stripes = np.where((across + int(rng.integers(4))) // 2 % 2, 45.0, -45.0)
    checker = np.where((yy // 3 + xx // 3 + int(rng.integers(2))) % 2, 45.0, -45.0)
    light = np.select([labels == 1, labels == 2], [stripes, checker], 0.0)
    image = MEAN_RGB + light[..., None] + rng.normal(0, 8, (*labels.shape, 3))
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def write_palette_png(path: Path, mask: np.ndarray) -> None:
    img = Image.fromarray(mask.astype(np.uint8))
    palette = [value for index in range(256) for value in PALETTE.get(index, (index, 255 - index, 90))]
    img.putpalette(palette)  # an L image with a palette becomes a P one: the same bytes, now indices
    img.save(path)


def write_texture_folder(root: Path, *, train: int = 12, val: int = 4, size: int = 64, seed: int = 0,
                         layout: str = "split", shuffle_masks: bool = False) -> SegmentationSet:
    """`root/images/{train,val}/<name>.png` and their masks at the same paths under `root/masks/` (layout="split"), or
    `root/images/<name>.png` and `root/masks/<name>.png` (layout="flat"); classes TEXTURE_CLASSES."""
    if layout not in ("split", "flat"):
        raise ValueError(f"layout {layout!r} is neither split nor flat")
    rng = np.random.default_rng(seed)
    made = SegmentationSet(root=Path(root), class_names=list(TEXTURE_CLASSES))
    for split, count in (("train", train), ("val", val)):
        folder = Path(split) if layout == "split" else Path()
        labels = [label_map(size, rng) for _ in range(count)]
        images = [texture_image(labels[i], rng) for i in range(count)]
        masks = [ignore_band(labels[i], int(rng.integers(1, 3)), width=int(rng.integers(2, 4))) for i in range(count)]
        if shuffle_masks:
            masks = masks[1:] + masks[:1]  # each image with its neighbour's mask
        for i in range(count):
            name = folder / (f"{split}-{i:03d}.png" if layout == "split" else f"img-{len(made.samples):03d}.png")
            image, mask = made.root / "images" / name, made.root / "masks" / name
            image.parent.mkdir(parents=True, exist_ok=True)
            mask.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(images[i]).save(image)
            write_palette_png(mask, masks[i])
            made.samples.append((image, mask, split if layout == "split" else None))
    return made


def raster_tile(labels: np.ndarray, rng: np.random.Generator, bands: int = 6) -> np.ndarray:
    """(H, W, bands) uint16 in 0..4000: each class's band means (BAND_MEANS, repeated past 6 bands) and texture."""
    yy, xx = np.mgrid[0:labels.shape[0], 0:labels.shape[1]]
    means = np.resize(BAND_MEANS.T, (bands, 3)).T  # class × band
    rows = np.where(yy // 2 % 2, 1.0, -1.0)  # a field's crop rows
    canopy = rng.normal(0, 1, labels.shape)  # a forest's crowns, uneven pixel to pixel
    texture = np.select([labels == 1, labels == 2], [300 * rows, 400 * canopy], 30 * rng.normal(0, 1, labels.shape))
    tile = means[labels] + texture[..., None] + rng.normal(0, 20, (*labels.shape, bands))
    return np.clip(np.rint(tile), 0, 4000).astype(np.uint16)


def no_data(labels: np.ndarray, rng: np.random.Generator, index: int) -> np.ndarray:
    """`labels` with IGNORE on a 3-pixel frame (even `index`) or an ellipse (odd): the raster's no data."""
    marked = labels.copy()
    if index % 2 == 0:
        marked[:3], marked[-3:], marked[:, :3], marked[:, -3:] = IGNORE, IGNORE, IGNORE, IGNORE
        return marked
    blob = Image.new("L", labels.shape[::-1], 0)
    cx, cy = (int(v) for v in rng.integers(8, min(labels.shape) - 8, 2))
    ImageDraw.Draw(blob).ellipse((cx - 6, cy - 5, cx + 6, cy + 5), fill=1)
    marked[np.array(blob, bool)] = IGNORE
    return marked


def write_raster_set(root: Path, *, n: int = 8, size: int = 64, bands: int = 6, seed: int = 0,
                     shuffle_masks: bool = False) -> SegmentationSet:
    """`root/tiles/<name>.tif` (uint16, `bands` samples a pixel), `root/labels/<name>.tif` (uint8, IGNORE no data) and
    `root/table.csv` (image,mask,split: every fourth tile val), its paths relative to the table's folder; classes
    RASTER_CLASSES."""
    rng = np.random.default_rng(seed)
    made = SegmentationSet(root=Path(root), class_names=list(RASTER_CLASSES), table=Path(root) / "table.csv")
    for folder in ("tiles", "labels"):
        (made.root / folder).mkdir(parents=True, exist_ok=True)
    labels = [label_map(size, rng, base=int(rng.integers(3))) for _ in range(n)]
    tiles = [raster_tile(labels[i], rng, bands) for i in range(n)]
    masks = [no_data(labels[i], rng, i) for i in range(n)]
    if shuffle_masks:
        masks = masks[1:] + masks[:1]
    rows = []
    for i in range(n):
        image, mask = Path("tiles") / f"tile-{i:03d}.tif", Path("labels") / f"tile-{i:03d}.tif"
        tifffile.imwrite(made.root / image, tiles[i], photometric="minisblack", planarconfig="contig")
        tifffile.imwrite(made.root / mask, masks[i], photometric="minisblack")
        split = "val" if i % 4 == 3 else "train"
        rows.append({"image": image.as_posix(), "mask": mask.as_posix(), "split": split})
        made.samples.append((made.root / image, made.root / mask, split))
    with made.table.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=["image", "mask", "split"])
        writer.writeheader()
        writer.writerows(rows)
    return made
