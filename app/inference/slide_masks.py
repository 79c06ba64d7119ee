"""A slide's class a pixel, predicted whole (segmentation with data.patches): the model over its tissue in tiles that
overlap (predict.overlap), each tile's scores weighed (predict.blend: gaussian, MONAI's sliding-window default, or
mean) into the band of rows tiles still reach; a row once no tile reaches it is finished and handed on. Never the
slide, nor its whole map, in memory: a band of `tile` rows of scores a slide."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import cv2
import numpy as np

from app.data.slides.layouts import Layout, foreground_of, layout_of
from app.data.slides.masks import fractions

SIGMA = 0.125  # of a tile's side: the gaussian weights' spread (MONAI's sigma_scale)
FLOOR = 1e-3  # of the centre's weight: a tile's edge still counts where no other tile reaches


@dataclass(frozen=True, kw_only=True)
class Tiling:
    """One slide's tiles: its map's (height, width) at the patches' resolution, level-0 pixels a map pixel, the tile's
    side, and each row of tiles that touch tissue: (top, [left, ...]) in map pixels, top to bottom."""

    layout: Layout
    shape: tuple[int, int]
    scale: tuple[float, float]
    tile: tuple[int, int]
    rows: list[tuple[int, list[int]]]

    @property
    def tiles(self) -> int:
        return sum(len(lefts) for _, lefts in self.rows)

    def corner(self, top: int, left: int) -> tuple[int, int]:  # a tile's top left at level 0
        return round(top * self.scale[0]), round(left * self.scale[1])


def tiling_of(path: str, patches, overlap: float) -> Tiling:
    """`path`'s tiles: the run's patch, a stride of (1 - overlap) of it, the last ones flush with the map's edge, those
    with any foreground (data.patches' own mask, from the cache) kept."""
    layout = layout_of(path, patches, grid=True, masked=False)
    tile = tuple(int(v) for v in patches.size)
    scale = (layout.extent[0] / tile[0], layout.extent[1] / tile[1])
    height, width = layout.slide.levels[0]
    shape = (int(height / scale[0]), int(width / scale[1]))
    tops, lefts = (_starts(shape[a], tile[a], max(1, round(tile[a] * (1 - overlap)))) for a in (0, 1))
    keep = np.ones((len(tops), len(lefts)), bool)
    if patches.min_foreground > 0 and len(tops) and len(lefts):
        mask, cell = foreground_of(layout.slide, layout.extent, patches.mask_bands)
        keep = fractions(mask, cell, layout.extent, (np.array(tops) * scale[0], np.array(lefts) * scale[1])) > 0
    rows = [(top, [left for left, on in zip(lefts, keep[r], strict=True) if on]) for r, top in enumerate(tops)]
    return Tiling(layout=layout, shape=shape, scale=scale, tile=tile, rows=[row for row in rows if row[1]])


def _starts(length: int, tile: int, stride: int) -> list[int]:
    """Tile starts from 0 by `stride`, the last flush with the end (none where a tile does not fit)."""
    if length < tile:
        return []
    starts = list(range(0, length - tile + 1, stride))
    return starts + [length - tile] if starts[-1] != length - tile else starts


def blend_weights(tile: tuple[int, int], blend: str) -> np.ndarray:
    """(h, w) float32: gaussian (the centre weighs most, so a pixel takes its class from the tile it is deepest in)
    or mean (every pixel alike)."""
    if blend == "mean":
        return np.ones(tile, np.float32)
    axes = [np.exp(-0.5 * ((np.arange(n) - (n - 1) / 2) / (SIGMA * n)) ** 2) for n in tile]
    weights = np.outer(*axes).astype(np.float32)
    return np.maximum(weights / weights.max(), FLOOR)


class RowBlender:
    """The band of a slide's map that tiles still reach: each class's weighed scores and the weights, `tile` rows."""

    def __init__(self, tiling: Tiling, classes: int, weights: np.ndarray):
        self.tiling, self.weights, self.top = tiling, weights, 0
        height, width = tiling.tile[0], tiling.shape[1]
        self.scores = np.zeros((height, width, classes), np.float32)
        self.weight = np.zeros((height, width), np.float32)
        self.product = np.empty((*tiling.tile, classes), np.float32)  # a tile's weighed scores, made once

    def add(self, top: int, left: int, scores: np.ndarray) -> None:
        """A tile's (h, w, classes) scores at (top, left), in its row: every row above `top` was finished first."""
        rows, (h, w) = slice(top - self.top, top - self.top + scores.shape[0]), scores.shape[:2]
        self.scores[rows, left:left + w] += np.multiply(scores, self.weights[:h, :w, None], out=self.product[:h, :w])
        self.weight[rows, left:left + w] += self.weights[:h, :w]

    def finish_to(self, row: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(top, blended scores, covered) of the rows above `row` (no tile to come reaches them), a band at most at a
        time (past the last tile, or between rows of tiles with no tissue, nothing covered), the band moved on."""
        end = min(row, self.tiling.shape[0])
        while self.top < end:
            done = min(end - self.top, self.scores.shape[0])
            covered = self.weight[:done] > 0
            yield self.top, self.scores[:done] / np.maximum(self.weight[:done], 1e-12)[..., None], covered
            kept = self.scores.shape[0] - done
            self.scores[:kept], self.weight[:kept] = self.scores[done:].copy(), self.weight[done:].copy()
            self.scores[kept:], self.weight[kept:] = 0, 0
            self.top += done


def at_tile(scores: np.ndarray, tile: tuple[int, int]) -> np.ndarray:
    """A model's (H, W, classes) scores at the tile's size (bilinear, where the model's input differs)."""
    if scores.shape[:2] == tuple(tile):
        return scores
    return np.stack([cv2.resize(scores[..., c], tile[::-1], interpolation=cv2.INTER_LINEAR)
                     for c in range(scores.shape[-1])], axis=-1)


def band_bytes(tiling: Tiling, classes: int) -> int:
    """What a slide's prediction holds: the band of scores and weights, a finished band's class and scores."""
    per_row = tiling.shape[1] * (classes * 4 + 4)
    return math.ceil(2 * tiling.tile[0] * per_row)
