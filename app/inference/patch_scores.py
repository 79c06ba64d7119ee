"""A patch run's image-level results: patches' probabilities aggregated, image figures, heatmaps, preview's sheet."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import cv2
import numpy as np

from app.data.pixels.decode import DecodeError
from app.data.slides.masks import thumbnail
from app.io import atomic_write, write_file, write_picture
from app.sheets import grid, rgb_view

HEATMAP_SIDE = 1024  # a heatmap's longer side at most, in pixels
SHEET_SIDE = 384  # a thumbnail's side on preview's sheet


def aggregate(probabilities: np.ndarray, how: str, top_k: int) -> np.ndarray:
    """One row of class scores from a row a patch: mean, max or mean of `top_k` highest a class; sums to 1."""
    if how == "max":
        scores = probabilities.max(axis=0)
    elif how == "topk_mean":
        scores = np.sort(probabilities, axis=0)[-top_k:].mean(axis=0)
    else:
        scores = probabilities.mean(axis=0)
    return scores / max(scores.sum(), 1e-12)


def by_image(split, outputs: list[tuple[np.ndarray, np.ndarray]], patches) -> list[dict]:
    """A row an image of `split` (a PatchSplit) with any patch read: its path, label, patches, aggregated scores."""
    positions = np.concatenate([p for p, _ in outputs]) if outputs else np.zeros(0, int)
    scores = np.concatenate([s for _, s in outputs]) if outputs else np.zeros((0, 0))
    images = split.image_of[positions]
    rows = []
    for image in np.unique(images):
        mine = scores[images == image]
        rows.append({"path": split.images.paths[image], "label": int(split.images.labels[image]),
                     "patches": len(mine), "scores": aggregate(mine, patches.aggregate.value, patches.top_k)})
    return rows


def image_figures(rows: list[dict], names: list[str]) -> dict:
    """Image-level accuracy and a confusion matrix (rows true) over `rows`."""
    confusion = np.zeros((len(names), len(names)), np.int64)
    for row in rows:
        confusion[row["label"], int(np.argmax(row["scores"]))] += 1
    return {"images": len(rows), "accuracy": float(np.trace(confusion) / max(len(rows), 1)),
            "confusion": confusion.tolist()}


def write_heatmap(split, image: int, cells: list[tuple[int, int, float]], out: Path) -> Path:
    """`out`.png, image `image`'s `cells` (top, left, score at level 0) over its thumbnail; `out`.heat.png, alone."""
    layout = split.layouts[image]
    side = max(layout.slide.levels[0])
    thumb, scale = thumbnail(layout.slide, max(side / HEATMAP_SIDE, 1.0))
    heat = np.zeros(thumb.shape[:2], np.float32)
    for top, left, score in cells:
        y0, x0 = int(top / scale), int(left / scale)
        y1, x1 = int(np.ceil((top + layout.extent[0]) / scale)), int(np.ceil((left + layout.extent[1]) / scale))
        heat[y0:y1, x0:x1] = np.maximum(heat[y0:y1, x0:x1], score)
    grey = (heat * 255).round().astype(np.uint8)
    colour = cv2.cvtColor(cv2.applyColorMap(grey, cv2.COLORMAP_INFERNO), cv2.COLOR_BGR2RGB)
    view = rgb_view(thumb[None])[0]
    blended = np.where((heat > 0)[..., None], (0.35 * view + 0.65 * colour).astype(np.uint8), view // 2)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_file(f"{out}.png", cv2.imencode(".png", cv2.cvtColor(blended, cv2.COLOR_RGB2BGR))[1].tobytes())
    write_file(f"{out}.heat.png", cv2.imencode(".png", grey)[1].tobytes())
    return Path(f"{out}.png")


def heatmap_names(paths: list[str]) -> dict[str, str]:
    """Each path's heatmap's name: its path under the folder all of them share, its suffix kept (one name a file)."""
    if not paths:
        return {}
    root = os.path.commonpath([os.path.dirname(os.path.abspath(path)) for path in paths])
    return {path: os.path.relpath(os.path.abspath(path), root) for path in paths}


def write_csv(path: Path, header: list[str], rows) -> None:
    """A CSV through csv.writer (a name with a comma or a quote stays one field), whole or not at all."""
    with atomic_write(path, newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def write_predictions(split, outputs: list[tuple[np.ndarray, np.ndarray]], *, names: list[str], patches,
                      out: Path) -> list[dict]:
    """patches.csv and a heatmap an image (<out>/heatmaps/); `by_image`'s rows, a heatmap not drawn its row's error."""
    rows = by_image(split, outputs, patches)
    positions = np.concatenate([p for p, _ in outputs]) if outputs else np.zeros(0, int)
    scores = np.concatenate([s for _, s in outputs]) if outputs else np.zeros((0, len(names)))
    places = [split.where(int(position)) for position in positions]
    write_csv(out / "patches.csv", ["path", "x", "y", *names],
              ([split.images.paths[image], left, top, *(f"{v:.6f}" for v in row)]
               for (image, top, left), row in zip(places, scores, strict=True)))
    at = {path: i for i, path in enumerate(split.images.paths)}
    named = heatmap_names(split.images.paths)
    images = split.image_of[positions] if len(positions) else positions
    for row in rows:  # each image's cells in one pass over its patches, not a search a cell
        image, top_class = at[row["path"]], int(np.argmax(row["scores"]))
        cells = [(*places[k][1:], float(scores[k, top_class])) for k in np.flatnonzero(images == image)]
        try:
            row["heatmap"] = str(write_heatmap(split, image, cells, out / "heatmaps" / named[row["path"]]))
        except DecodeError as error:  # its thumbnail's level is damaged: the scores stand, the picture is not drawn
            row["heatmap"], row["error"] = "", f"no heatmap: {error}"
    return rows


def write_patch_sheet(split, indices: list[int], seed: int, out: Path) -> None:
    """<out>: samples `indices` (epoch 0's draws) on thumbnails, foreground grid green, drawn patches yellow."""
    drawn: dict[int, list[tuple[int, int]]] = {}
    for i in indices:
        image, top, left = split.where(i, (seed, 0, 0))
        drawn.setdefault(image, []).append((top, left))
    views = [_sheet_view(split.layouts[image], corners) for image, corners in drawn.items()]
    captions = [f"{Path(split.images.paths[image]).name}: {len(drawn[image])} drawn" for image in drawn]
    write_picture(out, grid(views, captions, columns=4).save)


def _sheet_view(layout, corners: list[tuple[int, int]]) -> np.ndarray:
    thumb, scale = thumbnail(layout.slide, max(max(layout.slide.levels[0]) / SHEET_SIDE, 1.0))
    fit = SHEET_SIDE / max(thumb.shape[:2])
    shown = cv2.resize(rgb_view(thumb[None])[0], (round(thumb.shape[1] * fit), round(thumb.shape[0] * fit)),
                       interpolation=cv2.INTER_AREA)
    scale /= fit
    view = np.full((SHEET_SIDE, SHEET_SIDE, 3), 255, np.uint8)
    view[:shown.shape[0], :shown.shape[1]] = shown

    def box(top: int, left: int) -> tuple[tuple[int, int], tuple[int, int]]:
        return ((int(left / scale), int(top / scale)),
                (int((left + layout.extent[1]) / scale), int((top + layout.extent[0]) / scale)))

    tint = view.copy()
    for cell in layout.cells():
        cv2.rectangle(tint, *box(*layout.corner(int(cell))), (60, 200, 60), -1)
    view = cv2.addWeighted(view, 0.7, tint, 0.3, 0)
    for top, left in corners:
        cv2.rectangle(view, *box(top, left), (250, 220, 0), 2)
    return view
