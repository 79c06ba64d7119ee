"""A slide's predicted map written as a tiled, pyramidal OME-TIFF, tile by tile: its rows gathered on disk (a zarr
array in a scratch folder, filled a band at a time), each level below halved by nearest neighbour a band at a time,
then every level streamed into the TIFF as SubIFDs, its µm a pixel in the resolution tags and the OME-XML (tifffile
reads every level; QuPath opens it through Bio-Formats)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tifffile
import zarr

from app.io import atomic_write

TILE = 256  # the TIFF's tiles, and the smallest level's largest side is under two of them


class Canvas:
    """A map of `shape` and `dtype` on disk, filled with `fill` until its rows are written, in `folder`."""

    def __init__(self, folder: Path, shape: tuple[int, int], dtype: str, fill: int):
        self.folder, self.fill = folder, fill
        self.levels = [self._array("0", shape, dtype)]

    def _array(self, name: str, shape: tuple[int, int], dtype: str):
        return zarr.open_array(store=str(self.folder / name), mode="w", shape=shape, dtype=dtype,
                               chunks=(TILE, TILE), fill_value=self.fill)

    def write_rows(self, top: int, rows: np.ndarray) -> None:
        self.levels[0][top:top + rows.shape[0]] = rows

    def build_levels(self) -> None:
        """Each level half the one above (every second pixel), until the smallest fits two tiles a side."""
        while max(self.levels[-1].shape) > 2 * TILE:
            above = self.levels[-1]
            below = self._array(str(len(self.levels)), tuple((n + 1) // 2 for n in above.shape), str(above.dtype))
            for top in range(0, above.shape[0], 2 * TILE):
                below[top // 2:(top + 2 * TILE + 1) // 2] = np.asarray(above[top:top + 2 * TILE])[::2, ::2]
            self.levels.append(below)

    def smallest(self) -> np.ndarray:
        return np.asarray(self.levels[-1][:])


def _tiles(level) -> Iterator[np.ndarray]:
    """A level's tiles in the TIFF's order, a band of tile rows read at a time."""
    for top in range(0, level.shape[0], TILE):
        band = np.asarray(level[top:top + TILE])
        for left in range(0, level.shape[1], TILE):
            yield band[:, left:left + TILE]


def write_pyramid(canvas: Canvas, path: Path, mpp: float | None, *, name: str) -> None:
    """`canvas`'s levels as a pyramidal OME-TIFF at `path` (written whole or not at all); `mpp`: level 0's µm a
    pixel, else none is recorded."""
    canvas.build_levels()
    top = canvas.levels[0]
    resolution = {} if mpp is None else {"resolution": (1e4 / mpp, 1e4 / mpp), "resolutionunit": "CENTIMETER"}
    physical = {} if mpp is None else {"PhysicalSizeX": mpp, "PhysicalSizeXUnit": "µm", "PhysicalSizeY": mpp,
                                       "PhysicalSizeYUnit": "µm"}
    options = {"tile": (TILE, TILE), "compression": "zlib", "photometric": "minisblack", "dtype": top.dtype}
    with atomic_write(path, mode="wb") as file, tifffile.TiffWriter(file, bigtiff=True, ome=True) as tif:
        tif.write(_tiles(top), shape=top.shape, subifds=len(canvas.levels) - 1, software="app predict",
                  metadata={"axes": "YX", "Name": name, **physical}, **resolution, **options)
        for level, array in enumerate(canvas.levels[1:], start=1):
            scaled = {} if mpp is None else {"resolution": (1e4 / (mpp * 2**level),) * 2,
                                             "resolutionunit": "CENTIMETER"}
            tif.write(_tiles(array), shape=array.shape, subfiletype=1, metadata=None, **scaled, **options)


def scratch(out: Path) -> tempfile.TemporaryDirectory:
    """A scratch folder beside the outputs (the same disk), removed when done."""
    out.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=".canvas-", dir=out)
