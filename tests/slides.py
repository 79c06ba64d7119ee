"""Small whole-slide images for the tests, written by tifffile as scanners write them: JPEG tiles, a pyramid of
SubIFDs halving each level, the resolution in µm a pixel. A slide is pale glass (low saturation) with "tissue" blobs
whose texture says the class: stripes (class 0) or dots (class 1)."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import tifffile
from PIL import Image, ImageDraw

GLASS = (236, 232, 238)
INK = {0: ((200, 90, 150), (120, 40, 120)), 1: ((150, 110, 210), (70, 40, 140))}  # each class's two colours


def tissue_mask(side: int, rng: np.random.Generator, blobs: int = 3) -> np.ndarray:
    """A few ellipses covering about a fifth of a `side`² slide: where the tissue is."""
    mask = np.zeros((side, side), np.uint8)
    for _ in range(blobs):
        centre = tuple(int(v) for v in rng.integers(side // 5, 4 * side // 5, 2))
        axes = tuple(int(v) for v in rng.integers(side // 10, side // 5, 2))
        cv2.ellipse(mask, centre, axes, float(rng.integers(0, 180)), 0, 360, 1, -1)
    return mask.astype(bool)


def slide_pixels(side: int, label: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(the RGB slide, its tissue mask): the class's texture inside the mask, glass outside, noise on both."""
    yy, xx = np.mgrid[0:side, 0:side]
    period = 12
    pattern = (yy // (period // 2)) % 2 == 0 if label == 0 else ((yy % period < 5) & (xx % period < 5))
    light, dark = (np.array(c, np.float32) for c in INK[label])
    texture = np.where(pattern[..., None], dark, light)
    mask = tissue_mask(side, rng)
    image = np.where(mask[..., None], texture, np.array(GLASS, np.float32))
    image += rng.normal(0, 6, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8), mask


def write_slide(path: Path, image: np.ndarray, *, levels: int = 3, tile: int = 256, mpp: float = 0.5,
                extrasamples: list[int] | None = None) -> None:
    """`image` as a JPEG-tiled TIFF with `levels - 1` halving SubIFD levels and its resolution (µm a pixel); with
    `extrasamples` (an RGBA's alpha: [2]), Deflate tiles (JPEG holds no alpha)."""
    per_cm = 1e4 / mpp
    kept = {"compression": "deflate", "extrasamples": extrasamples} if extrasamples else {"compression": "jpeg"}
    with tifffile.TiffWriter(path) as tif:
        tif.write(image, tile=(tile, tile), photometric="rgb", subifds=levels - 1,
                  resolution=(per_cm, per_cm), resolutionunit="CENTIMETER", **kept)
        for level in range(1, levels):
            step = 2 ** level
            tif.write(cv2.resize(image, (image.shape[1] // step, image.shape[0] // step),
                                 interpolation=cv2.INTER_AREA), tile=(tile, tile), photometric="rgb", subfiletype=1,
                      **kept)


def write_svs(path: Path, image: np.ndarray, *, levels: int = 3, tile: int = 256, mpp: float = 0.5) -> None:
    """`image` as an Aperio SVS as OpenSlide reads one: each level a JPEG-tiled page of its own (not SubIFDs), the
    ImageDescription Aperio's (its MPP), tifffile's own JSON description left out."""
    with tifffile.TiffWriter(path) as tif:
        for level in range(levels):
            step = 2 ** level
            scaled = image if not level else cv2.resize(image, (image.shape[1] // step, image.shape[0] // step),
                                                        interpolation=cv2.INTER_AREA)
            height, width = scaled.shape[:2]
            tif.write(scaled, tile=(tile, tile), compression="jpeg", photometric="rgb", metadata=None,
                      subfiletype=1 if level else 0,
                      description=f"Aperio Image Library v12.0.0\r\n{width}x{height} [0,0 {width}x{height}] "
                                  f"({tile}x{tile}) JPEG/RGB Q=90|AppMag = 20|MPP = {mpp}")


def write_slides(folder: Path, *, per_class: int = 4, side: int = 2048, classes: tuple[str, str] = ("stripes", "dots"),
                 svs: bool = False) -> dict[Path, np.ndarray]:
    """`per_class` slides of each class in <folder>/<class>/ (the first class striped, the second dotted; Aperio SVS
    files with `svs`), and each one's tissue mask."""
    rng = np.random.default_rng(0)
    masks = {}
    for label, name in enumerate(classes):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            image, mask = slide_pixels(side, label, rng)
            path = folder / name / f"slide{i}.{'svs' if svs else 'tif'}"
            (write_svs if svs else write_slide)(path, image)
            masks[path] = mask
    return masks


def he_pixels(side: int, rng: np.random.Generator) -> np.ndarray:
    """Tissue from edge to edge as H&E stains it, no glass: pink stroma, dark purple nuclei over about a third."""
    image = np.empty((side, side, 3), np.float32)
    image[:] = (235, 160, 205)
    nuclei = np.zeros((side, side), np.uint8)
    for _ in range(side * side // 400):
        centre = tuple(int(v) for v in rng.integers(0, side, 2))
        cv2.circle(nuclei, centre, int(rng.integers(5, 11)), 1, -1)
    image[nuclei.astype(bool)] = (95, 55, 150)
    image += rng.normal(0, 6, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def tiles_of(path: Path, levels: slice) -> list[tuple[int, int]]:
    """(offset, bytes) of each JPEG tile of `levels`."""
    with tifffile.TiffFile(path) as tif:
        return [(offset, count) for level in tif.series[0].levels[levels]
                for offset, count in zip(level.keyframe.dataoffsets, level.keyframe.databytecounts, strict=True)]


def zero_tiles(path: Path, levels: slice) -> None:
    """Zeros where `levels`' JPEG tiles were: the header reads, those tiles do not decode."""
    tiles = tiles_of(path, levels)
    damaged = bytearray(path.read_bytes())
    for offset, count in tiles:
        damaged[offset:offset + count] = bytes(count)
    path.write_bytes(bytes(damaged))


ANNOTATED_CLASSES = ["glass", "stripes", "dots"]


def _blob(centre: np.ndarray, radius: float, rng: np.random.Generator, points: int = 9) -> np.ndarray:
    """A ring of `points` (x, y) about `centre`, its radius jittered: a region as an annotator outlines it."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, points))
    radii = radius * rng.uniform(0.75, 1.1, points)
    return centre + np.stack([np.cos(angles) * radii, np.sin(angles) * radii], axis=1)


def annotated_regions(side: int, rng: np.random.Generator) -> list[tuple[int, list[np.ndarray]]]:
    """(class, rings) of each region of a `side`² slide, in level-0 pixels: a striped region with a hole of glass, a
    dotted one beside it, and a dotted one inside the striped one's hole (a region drawn within another's hole)."""
    big = np.array([side * 0.35, side * 0.4]) + rng.uniform(-side * 0.04, side * 0.04, 2)
    other = np.array([side * 0.72, side * 0.7]) + rng.uniform(-side * 0.04, side * 0.04, 2)
    return [(1, [_blob(big, side * 0.28, rng, 11), _blob(big, side * 0.13, rng, 7)]),
            (2, [_blob(big, side * 0.06, rng, 6)]),
            (2, [_blob(other, side * 0.2, rng)])]


def regions_label_map(side: int, regions: list[tuple[int, list[np.ndarray]]]) -> np.ndarray:
    """The regions drawn at level 0 by Pillow (a rasteriser of its own, not the app's): 0 glass, else the class."""
    img = Image.new("L", (side, side), 0)
    draw = ImageDraw.Draw(img)
    for label, rings in regions:  # in order: each hole cleared to glass, then what lies in it drawn over
        draw.polygon([tuple(p) for p in rings[0]], fill=label)
        for hole in rings[1:]:
            draw.polygon([tuple(p) for p in hole], fill=0)
    return np.array(img)


def geojson_of(regions: list[tuple[int, list[np.ndarray]]], names: list[str]) -> dict:
    """QuPath's export of the regions: a FeatureCollection of annotations, each ring closed, plus an unclassified
    outline (QuPath's tissue annotation) that has no class and a point, which carry none."""
    features = [{"type": "Feature", "id": f"r{k}", "geometry": {"type": "Polygon", "coordinates": [
        [[round(float(x), 2), round(float(y), 2)] for x, y in [*ring, ring[0]]] for ring in rings]},
        "properties": {"objectType": "annotation", "classification": {"name": names[label], "color": [200, 0, 0]}}}
        for k, (label, rings) in enumerate(regions)]
    features.append({"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [[[0, 0], [9, 0], [9, 9],
                     [0, 0]]]}, "properties": {"objectType": "annotation"}})
    features.append({"type": "Feature", "geometry": {"type": "Point", "coordinates": [5, 5]},
                     "properties": {"classification": {"name": names[1]}}})
    return {"type": "FeatureCollection", "features": features}


def write_annotated_slides(root: Path, *, train: int = 4, val: int = 2, side: int = 512, tile: int = 128,
                           names: list[str] = ANNOTATED_CLASSES) -> dict[Path, np.ndarray]:
    """Slides under root/slides/{train,val}/ whose regions of stripes and dots (ANNOTATED_CLASSES 1 and 2) lie on
    glass (0); each one's annotation as a uint8 label raster at a quarter of its size, tiled
    (root/rasters/<split>/<name>.tif), and as QuPath's GeoJSON (root/polygons/<split>/<name>.geojson), its classes
    `names`. Returns each slide's label map at level 0."""
    rng = np.random.default_rng(1)
    drawn = {}
    for split, count in (("train", train), ("val", val)):
        for folder in ("slides", "rasters", "polygons"):
            (root / folder / split).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            regions = annotated_regions(side, rng)
            labels = regions_label_map(side, regions)
            yy, xx = np.mgrid[0:side, 0:side]
            textures = {1: (yy // 6) % 2 == 0, 2: (yy % 12 < 5) & (xx % 12 < 5)}
            image = np.empty((side, side, 3), np.float32)
            image[:] = GLASS
            for label, pattern in textures.items():
                light, dark = (np.array(c, np.float32) for c in INK[label - 1])
                image[labels == label] = np.where(pattern[labels == label][:, None], dark, light)
            image = np.clip(image + rng.normal(0, 6, image.shape), 0, 255).astype(np.uint8)
            name = f"{split}-{i}"
            path = root / "slides" / split / f"{name}.tif"
            write_slide(path, image, levels=2, tile=tile)
            quarter = labels[2::4, 2::4]  # each quarter-size pixel the class at its centre
            tifffile.imwrite(root / "rasters" / split / f"{name}.tif", quarter, tile=(64, 64), compression="zlib",
                             photometric="minisblack")
            (root / "polygons" / split / f"{name}.geojson").write_text(json.dumps(geojson_of(regions, names)))
            drawn[path] = labels
    return drawn
