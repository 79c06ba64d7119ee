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


# A class's colour in overlays and predicted masks' palettes: Tableau's 10, then spread hues.
TABLEAU = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
           (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207))


def class_colours(count: int) -> np.ndarray:
    """(count, 3) uint8: a colour a class, the same for a class index in every picture the app draws."""
    spread = [tuple(int(255 * c) for c in _hsv((0.61803 * k) % 1.0)) for k in range(max(count - len(TABLEAU), 0))]
    return np.array([*TABLEAU, *spread][:count], np.uint8)


def _hsv(hue: float) -> tuple[float, float, float]:
    sector, f = int(hue * 6), hue * 6 - int(hue * 6)
    return [(1, f, 0), (1 - f, 1, 0), (0, 1, f), (0, 1 - f, 1), (f, 0, 1), (1, 0, 1 - f)][sector % 6]


def overlay(rgb: np.ndarray, mask: np.ndarray, colours: np.ndarray, alpha: float = 0.45) -> np.ndarray:
    """`rgb` with each pixel's class colour laid over it; a value past the classes (the ignore index) left bare."""
    classed = mask < len(colours)
    out = rgb.astype(np.float32)
    out[classed] = (1 - alpha) * out[classed] + alpha * colours[mask[classed]]
    return out.astype(np.uint8)


def masked_grid(images: np.ndarray, masks: np.ndarray, class_names: list[str]) -> Image.Image:
    """Each image beside itself with its mask laid over, captioned with the classes it shows; a legend below."""
    colours = class_colours(len(class_names))
    cells, captions = [], []
    for image, mask in zip(images, masks, strict=True):
        shown = [class_names[c] for c in np.unique(mask) if c < len(class_names)]
        cells += [image, overlay(image, mask, colours)]
        captions += ["", "+".join(shown) or "(ignored)"]
    return with_legend(grid(cells, captions), class_names, colours)


def with_legend(sheet: Image.Image, class_names: list[str], colours: np.ndarray) -> Image.Image:
    """`sheet` over a row of each class's colour and name."""
    row = 16
    width = max(sheet.width, 24 + 7 * max(len(f"{k} {name}") for k, name in enumerate(class_names)))
    out = Image.new("RGB", (width, sheet.height + row * len(class_names) + 4), "white")
    out.paste(sheet, (0, 0))
    draw = ImageDraw.Draw(out)
    for k, (name, colour) in enumerate(zip(class_names, colours, strict=True)):
        top = sheet.height + 2 + k * row
        draw.rectangle((4, top + 2, 16, top + 14), fill=tuple(int(c) for c in colour))
        draw.text((22, top + 2), f"{k} {name}", fill="black")
    return out
