"""A worker's decoded TIFF chunks, kept to data.patches.chunk_cache_mib, least recently read dropped first: overlapping
tiles and patches smaller than a chunk share chunks, decoded once, not once a patch (zarr's experimental CacheStore
keeps one store's: this, one budget over every slide and level open)."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np


class DecodedChunks:
    """Chunks as (height, width, bands) arrays, keyed by their level's key and (chunk row, chunk column)."""

    def __init__(self):
        self.held, self.chunks, self.lock = 0, OrderedDict(), threading.Lock()  # workers may be threads

    def region(self, key: tuple, level, budget: int, place: tuple) -> np.ndarray | None:
        """(height, width, bands) of `level` (zarr array, axes) at `place` (corner, size), clipped at its edges; None
        where a chunk exceeds `budget` bytes."""
        (array, axes), (corner, size) = level, place
        y, x = axes.index("Y"), axes.index("X")
        (chunk_h, chunk_w), (height, width) = (array.chunks[y], array.chunks[x]), (array.shape[y], array.shape[x])
        (top, left), bottom, right = corner, min(corner[0] + size[0], height), min(corner[1] + size[1], width)
        bands = int(np.prod([n for i, n in enumerate(array.shape) if i not in (y, x)], dtype=np.int64))
        if bottom <= top or right <= left or chunk_h * chunk_w * bands * array.dtype.itemsize > budget:
            return None
        out = np.empty((bottom - top, right - left, bands), array.dtype)
        for row in range(top // chunk_h, (bottom - 1) // chunk_h + 1):
            for col in range(left // chunk_w, (right - 1) // chunk_w + 1):
                y0, x0 = row * chunk_h, col * chunk_w  # the chunk's corner; below, the part of it the region takes
                window = tuple(slice(y0, y0 + chunk_h) if axis == "Y" else slice(x0, x0 + chunk_w) if axis == "X"
                               else slice(None) for axis in axes)
                chunk = self._chunk((*key, row, col), level, window, budget)
                y1, y2 = max(top, y0), min(bottom, y0 + chunk_h)
                x1, x2 = max(left, x0), min(right, x0 + chunk_w)
                out[y1 - top:y2 - top, x1 - left:x2 - left] = chunk[y1 - y0:y2 - y0, x1 - x0:x2 - x0]
        return out

    def _chunk(self, key: tuple, level, window: tuple, budget: int) -> np.ndarray:
        with self.lock:
            if key in self.chunks:
                self.chunks.move_to_end(key)
                return self.chunks[key]
        array, axes = level
        chunk = bands_last(np.asarray(array[window]), axes)
        with self.lock:
            if key in self.chunks:  # another thread read it meanwhile
                self.held -= self.chunks[key].nbytes
            self.chunks[key] = chunk
            self.held += chunk.nbytes
            while self.held > budget:
                self.held -= self.chunks.popitem(last=False)[1].nbytes
        return chunk

    def drop_all(self) -> None:
        with self.lock:
            self.chunks.clear()
            self.held = 0


def bands_last(region: np.ndarray, axes: str) -> np.ndarray:
    """A zarr read in its level's axes as (height, width, bands), contiguous."""
    order = [axes.index("Y"), axes.index("X"), *[i for i, axis in enumerate(axes) if axis not in "YX"]]
    moved = np.transpose(region, order)
    return np.ascontiguousarray(moved.reshape(moved.shape[0], moved.shape[1], -1))
