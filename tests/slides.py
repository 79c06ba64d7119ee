"""Small whole-slide images for the tests, written by tifffile as scanners write them: JPEG tiles, a pyramid of
SubIFDs halving each level, the resolution in µm a pixel. A slide is pale glass (low saturation) with "tissue" blobs
whose texture says the class: stripes (class 0) or dots (class 1)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import tifffile

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
