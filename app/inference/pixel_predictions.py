"""`predict` with data.task=segmentation: a mask PNG an input (class indices, at the input's own size), an overlay of
the classes' colours over it with the legend, and predictions.csv's row of each class's share of the pixels."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from PIL import Image

from app.data.pixels.decode import Decode
from app.io import write_picture
from app.processes import stop_if_interrupted
from app.sheets import class_colours, overlay, rgb_view, with_legend


def at_size(scores: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Each pixel's class at `size` (H, W): the scores resized (bilinear, a class at a time), then the likeliest."""
    height, width = size
    if scores.shape[:2] != (height, width):
        scores = np.stack([cv2.resize(scores[..., c], (width, height), interpolation=cv2.INTER_LINEAR)
                           for c in range(scores.shape[-1])], axis=-1)
    return scores.argmax(axis=-1)


def mask_picture(mask: np.ndarray, classes: int) -> Image.Image:
    """A palette PNG of class indices (the classes' colours), or 16-bit greyscale past 256 classes."""
    if classes > 256:
        return Image.fromarray(mask.astype(np.uint16))
    picture = Image.fromarray(mask.astype(np.uint8), mode="P")
    picture.putpalette(class_colours(classes).ravel().tolist())
    return picture


def output_name(path: str, root: Path, taken: set[Path], suffix: str) -> Path:
    """An input's relative path under `root` with `suffix`; where another input took that name (a.jpg, a.png), its
    whole name with `suffix` added. The name is added to `taken`."""
    rel = Path(path).relative_to(root) if root.is_dir() else Path(Path(path).name)
    named = rel.with_suffix(suffix) if rel.with_suffix(suffix) not in taken else Path(f"{rel}{suffix}")
    taken.add(named)
    return named


class MaskWriter:
    """Writes each predicted input's mask and overlay under `out` (masks/, overlays/) at its relative path."""

    def __init__(self, out: Path, names: list[str], root: Path):
        self.out, self.names, self.root = out, names, root
        self.colours, self.written = class_colours(len(names)), set()

    def _named(self, path: str) -> Path:
        return output_name(path, self.root, self.written, ".png")

    def write(self, path: str, image: np.ndarray, scores: np.ndarray) -> tuple[str, np.ndarray]:
        """(the mask's path, each class's share of its pixels) for the input at `path`, `image` its pixels."""
        mask = at_size(scores, image.shape[:2])
        stem = self._named(path)
        target = self.out / "masks" / stem
        target.parent.mkdir(parents=True, exist_ok=True)
        write_picture(target, mask_picture(mask, len(self.names)).save)
        laid = overlay(rgb_view(image[None])[0], mask, self.colours)
        picture = with_legend(Image.fromarray(laid), self.names, self.colours)
        (self.out / "overlays" / stem).parent.mkdir(parents=True, exist_ok=True)
        write_picture(self.out / "overlays" / stem, picture.save)
        shares = np.bincount(mask.ravel(), minlength=len(self.names)) / mask.size
        return str(target.relative_to(self.out)), shares


def predicted_rows(loader, split, net, writer: MaskWriter, *, decode: Decode) -> list[list]:
    """A row an input: path, its mask's file, each class's share of its pixels, and the error where unreadable;
    `decode`: the run's bands and type, at the input's full size (where its mask is written)."""
    rows, done = [], 0
    for x, _ in loader.every_sample("predict"):
        stop_if_interrupted()
        scores = np.asarray(net.predict_on_batch(x), np.float32)
        for index, own in enumerate(scores, start=done):
            error = loader.failed("predict").get(index)
            if error is not None:
                rows.append([split.describe(index), "", *([""] * len(writer.names)), error])
                continue
            path = split.describe(index)
            mask_file, shares = writer.write(path, split.read(index, decode), own)
            rows.append([path, mask_file, *(f"{s:.6f}" for s in shares), ""])
        done += len(x)
    return rows
