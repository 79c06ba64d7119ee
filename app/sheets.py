"""Captioned image grids (Pillow) for augmented.png and preview.png; `rgb_view`: any bands and type as RGB to see."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw


def grid(images: list[np.ndarray] | np.ndarray, captions: list[str], columns: int = 8) -> Image.Image:
    """The images (uint8 H×W×3, one size) in rows of `columns` over their captions, small ones drawn larger."""
    count, (height, width) = len(images), np.asarray(images[0]).shape[:2]
    scale = -(-96 // max(height, width))  # at least 96 px a cell
    cell_w, cell_h = width * scale, height * scale
    text = 14 * max(caption.count("\n") + 1 for caption in captions)
    rows, columns = -(-count // columns), min(columns, count)
    sheet = Image.new("RGB", (columns * (cell_w + 4), rows * (cell_h + text + 4)), "white")
    draw = ImageDraw.Draw(sheet)
    for i, (image, caption) in enumerate(zip(images, captions, strict=True)):
        x, y = (i % columns) * (cell_w + 4), (i // columns) * (cell_h + text + 4)
        sheet.paste(Image.fromarray(np.asarray(image, np.uint8)).resize((cell_w, cell_h), Image.NEAREST), (x, y))
        lines = [line[: max(4, cell_w // 6)] for line in caption.split("\n")]
        draw.text((x + 1, y + cell_h + 1), "\n".join(lines), fill="black", spacing=2)
    return sheet


def rgb_view(batch: np.ndarray, bands=None) -> np.ndarray:
    """A batch (N, H, W, bands) as uint8 RGB to look at: 8-bit RGB as it is; else `bands` (three indices; else the first
    three, or the one as grey), each image's each stretched from its 2nd to its 98th percentile."""
    batch = np.asarray(batch)
    if batch.dtype == np.uint8 and batch.shape[-1] == 3 and bands is None:
        return batch
    picked = list(bands) if bands is not None else ([0, 1, 2] if batch.shape[-1] >= 3 else [0, 0, 0])
    chosen = batch[..., picked].astype(np.float32)
    low = np.percentile(chosen, 2, axis=(1, 2), keepdims=True)
    high = np.maximum(np.percentile(chosen, 98, axis=(1, 2), keepdims=True), low + 1e-6)
    return np.clip((chosen - low) / (high - low) * 255, 0, 255).astype(np.uint8)
