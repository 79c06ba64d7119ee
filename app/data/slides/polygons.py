"""QuPath's GeoJSON polygons (holes kept, level-0 pixels, classification.name), indexed by box once a process and
filled into a patch's mask, only those touching it."""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass

import cv2
import numpy as np

from app.data.pixels.decode import DecodeError

SHIFT = 8  # cv2.fillPoly's fractional bits: a vertex placed to 1/256 of a patch's pixel
KEPT = 8  # a worker's indexes of recently read files, as its open slides (regions.OPEN_FILES)
AREAS = ("Polygon", "MultiPolygon")


@dataclass(frozen=True)
class Polygons:
    """One file's polygons, largest first: a region drawn inside another is filled over it, keeping its class."""

    rings: list[list[np.ndarray]]  # each polygon's rings, (n, 2) float64 x, y at level 0
    classes: np.ndarray  # int, each polygon's class index
    boxes: np.ndarray  # (n, 4) float64: x_min, y_min, x_max, y_max
    skipped: int  # features that are not areas (points, lines) or have no class

    def fill(self, mask: np.ndarray, corner: tuple[int, int], scale: tuple[float, float]) -> np.ndarray:
        """`mask` filled by each polygon touching it; pixel (r, c) is level 0's corner + ((r, c) + 0.5) × scale."""
        (top, left), (sy, sx) = corner, scale
        height, width = mask.shape
        bottom, right = top + height * sy, left + width * sx
        touching = np.flatnonzero((self.boxes[:, 0] < right) & (self.boxes[:, 2] > left) &
                                  (self.boxes[:, 1] < bottom) & (self.boxes[:, 3] > top))
        inside = np.zeros_like(mask, dtype=np.uint8)
        for k in touching:
            inside[:] = 0
            placed = [np.round(((ring - (left, top)) / (sx, sy) - 0.5) * (1 << SHIFT)).astype(np.int32)
                      for ring in self.rings[k]]
            cv2.fillPoly(inside, placed[:1], 1, lineType=cv2.LINE_8, shift=SHIFT)
            if len(placed) > 1:
                cv2.fillPoly(inside, placed[1:], 0, lineType=cv2.LINE_8, shift=SHIFT)
            mask[inside.astype(bool)] = self.classes[k]
        return mask


def read_polygons(path: str | os.PathLike, classes: list[str]) -> Polygons:
    """`path`'s polygons, classes by `classes`' index; a DecodeError naming what is not such a file or class."""
    try:
        with open(path, "rb") as file:
            document = json.load(file)
    except (OSError, ValueError) as error:
        raise DecodeError(f"cannot read it as GeoJSON: {error}") from error
    features = document.get("features") if isinstance(document, dict) and document.get("type") == "FeatureCollection" \
        else [document] if isinstance(document, dict) and document.get("type") == "Feature" else document
    if not isinstance(features, list):
        raise DecodeError("it is not GeoJSON as QuPath exports it: a FeatureCollection, a Feature or a list of "
                          "Features")
    index = {name: i for i, name in enumerate(classes)}
    rings, labels, skipped = [], [], 0
    for number, feature in enumerate(features):
        geometry, name = _geometry(feature), _class_name(feature)
        if geometry is None or geometry.get("type") not in AREAS or name is None:
            skipped += 1
            continue
        if name not in index:
            raise DecodeError(f"its feature {number} is of class {name!r}, not one of data.classes "
                              f"{classes}: name it there, or reclassify it")
        parts = [geometry["coordinates"]] if geometry["type"] == "Polygon" else geometry["coordinates"]
        for polygon in parts:
            rings.append([_ring(ring, number) for ring in polygon if len(ring) >= 3])
            labels.append(index[name])
    rings, labels = [r for r in rings if r], [c for r, c in zip(rings, labels, strict=True) if r]
    boxes = np.array([[*r[0].min(axis=0), *r[0].max(axis=0)] for r in rings], np.float64).reshape(-1, 4)
    order = np.argsort(-(boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), kind="stable")
    return Polygons(rings=[rings[k] for k in order], classes=np.array(labels, np.int64).reshape(-1)[order],
                    boxes=boxes[order], skipped=skipped)


def _geometry(feature) -> dict | None:
    geometry = feature.get("geometry") if isinstance(feature, dict) else None
    return geometry if isinstance(geometry, dict) else None


def _class_name(feature) -> str | None:
    """QuPath's properties.classification.name (an unclassified annotation has none)."""
    classification = (feature.get("properties") or {}).get("classification")
    name = classification.get("name") if isinstance(classification, dict) else None
    return name if isinstance(name, str) else None


def _ring(ring, feature: int) -> np.ndarray:
    try:
        points = np.asarray(ring, np.float64)[:, :2]
    except (ValueError, TypeError, IndexError) as error:
        raise DecodeError(f"its feature {feature} has a ring that is not a list of [x, y] points") from error
    if not np.isfinite(points).all():
        raise DecodeError(f"its feature {feature} has a point that is not a finite number")
    return points


class Indexes:
    """A process's polygons of recently read files: each file parsed once, not once a patch."""

    def __init__(self, size: int = KEPT):
        self.size, self.kept = size, OrderedDict()

    def of(self, path: str, classes: list[str]) -> Polygons:
        if path not in self.kept:
            self.kept[path] = read_polygons(path, classes)
            while len(self.kept) > self.size:
                self.kept.popitem(last=False)
        self.kept.move_to_end(path)
        return self.kept[path]


indexes = Indexes()
