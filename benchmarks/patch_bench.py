"""Patches of slides, read three ways in one run of `python -m app bench`: this loader on the slides (alone, and
through the step loop), the hand-written reader a pathology user puts in a Keras PyDataset with workers
(`keras_regions`: OpenSlide's read_region, or the level's zarr array through tifffile), and this loader on a prepared
copy of the same slides' patches. Twice: JPEG-tiled pyramidal TIFFs (tifffile) and Aperio SVS files (OpenSlide).

The slides are written from pre-encoded 512² JPEG tiles, six distinct tissue tiles a class (tests/slides.py's
texture, noisy as a scan is) in a disc on glass, so writing them takes seconds; each 16,384² with five levels.

Usage: .venv/bin/python benchmarks/patch_bench.py [folder] [bench overrides...]   (default outputs/patch_bench)
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import imagecodecs
import numpy as np
import tifffile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from slides import slide_pixels  # noqa: E402 - the tests' own slide texture

TILE, TILES, LEVELS = 512, 32, 5  # 32 × 32 tiles of 512²: 16,384² pixels
PER_CLASS = 3
PATCHES = ["data=folder", "data.patches.size=[224,224]", "data.patches.level=0", "data.patches.per_image=64",
           "data.image_size=[224,224]", "data.val_fraction=0.34"]
BENCH = ["data.batch_size=32", "bench.batches=30", "bench.warmup=3", "bench.memory=false", "queue.workers=2",
         "bench.modes=[loader,loader_steps,keras_regions,serial]"]


def tiles(label: int, rng: np.random.Generator) -> dict[str, list[bytes]]:
    glass = [imagecodecs.jpeg_encode(np.clip(rng.normal(236, 6, (TILE, TILE, 3)), 0, 255).astype(np.uint8), level=90)]
    tissue = [imagecodecs.jpeg_encode(_tissue(label, rng), level=90) for _ in range(6)]
    return {"glass": glass, "tissue": tissue}


def _tissue(label: int, rng: np.random.Generator) -> np.ndarray:
    """A tile of tissue texture: the window of a generated slide most covered by its tissue."""
    image, mask = slide_pixels(4 * TILE, label, rng)
    corners = [(y, x) for y in range(0, 3 * TILE + 1, TILE // 4) for x in range(0, 3 * TILE + 1, TILE // 4)]
    y, x = max(corners, key=lambda c: mask[c[0]:c[0] + TILE, c[1]:c[1] + TILE].mean())
    return image[y:y + TILE, x:x + TILE]


def write_slide(path: Path, label: int, seed: int, *, svs: bool) -> None:
    """A slide of tissue discs on glass, from pre-encoded tiles: levels as SubIFDs (TIFF) or top-level pages (SVS)."""
    rng = np.random.default_rng(seed)
    made = tiles(label, rng)
    yy, xx = np.mgrid[0:TILES, 0:TILES]
    centre = rng.integers(8, 24, 2)
    coarse = (yy - centre[0]) ** 2 + (xx - centre[1]) ** 2 < rng.integers(7, 11) ** 2

    def encoded(level: int):
        step, n = 2 ** level, -(-TILES // 2 ** level)
        for i in range(n):
            for j in range(n):
                block = coarse[i * step:(i + 1) * step, j * step:(j + 1) * step]
                kind = "tissue" if block.mean() > 0.5 else "glass"
                yield made[kind][(i * 7 + j * 3) % len(made[kind])]

    side = TILE * TILES
    with tifffile.TiffWriter(path, bigtiff=True) as tif:
        for level in range(LEVELS):
            size = -(-side // 2 ** level)
            extra = {"subifds": LEVELS - 1} if not (svs or level) else {}
            if svs:
                extra = {"metadata": None, "description": f"Aperio Image Library v12.0.0\r\n{size}x{size} [0,0 "
                                                          f"{size}x{size}] ({TILE}x{TILE}) JPEG/RGB Q=90|MPP = 0.25"}
            tif.write(encoded(level), shape=(size, size, 3), dtype=np.uint8, tile=(TILE, TILE), compression="jpeg",
                      photometric="rgb", subfiletype=1 if level else 0, **extra)


def run(args: list[str], cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "app", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"python -m app {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def main(folder: Path, extra: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for kind in ("tif", "svs"):
        slides = folder / kind
        for label, name in enumerate(("stripes", "dots")):
            (slides / name).mkdir(parents=True, exist_ok=True)
            for i in range(PER_CLASS):
                path = slides / name / f"slide{i}.{kind}"
                if not path.exists():
                    write_slide(path, label, 10 * label + i, svs=kind == "svs")
        data = [*PATCHES, f"data.path={slides}"]
        copy = folder / f"{kind}-copy"
        print(run(["prepare", *data, f"prepare.out={copy}", "prepare.patch_draws=64"], folder).strip().splitlines()[-1])
        out = folder / f"bench-{kind}-{time.strftime('%Y%m%d-%H%M%S')}"  # a new folder: an earlier run's is kept
        printed = run(["bench", *data, *BENCH, f"bench.prepared=[{copy}]", f"hydra.run.dir={out}", *extra], folder)
        print(f"\n{kind}: python -m app bench {' '.join(data + BENCH)} bench.prepared=[{copy}]")
        print(printed.split("\nwritten:")[0])


if __name__ == "__main__":
    main((Path(sys.argv[1]) if len(sys.argv) > 1 else Path("outputs/patch_bench")).absolute(), sys.argv[2:])
