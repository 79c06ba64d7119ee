"""A 40,960² whole-slide image (4.7 GiB decoded) and a short patch run on it: each worker's private memory against the
plan's, and the run's measured peak against its prediction. The slide is written from pre-encoded JPEG tiles (a
second or two): tissue tiles in two discs on glass, a pyramid of six halving SubIFD levels.

Usage: .venv/bin/python benchmarks/slide_memory.py [folder]   (default outputs/slide_memory; the slide is kept there)
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import imagecodecs
import numpy as np
import tifffile

from app.io import atomic_write

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from slides import slide_pixels  # noqa: E402 - the tests' own slide texture

TILE, TILES = 512, 80  # 80 × 80 tiles of 512²: 40,960² pixels
# min_foreground=0: patches anywhere (the slide's lowest levels, which the foreground mask is made from, repeat one
# glass tile: no tissue would be found there); a patch reads the same tiles on glass as on tissue
RUN = ["data=folder", "data.val_fraction=0.5", "data.patches.size=[256,256]", "data.patches.level=0",
       "data.patches.min_foreground=0", "data.patches.per_image=64", "data.image_size=[256,256]",
       "data.batch_size=16", "model.widths=[8,16]", "trainer.epochs=1", "trainer.steps_per_epoch=8",
       "trainer.validation_steps=2", "queue.workers=2", "logger=none", "print_config=false"]


def write_slide(path: Path) -> None:
    rng = np.random.default_rng(0)
    glass = np.clip(rng.normal(236, 6, (TILE, TILE, 3)), 0, 255).astype(np.uint8)
    tiles = {"glass": imagecodecs.jpeg_encode(glass, level=90),
             "tissue": imagecodecs.jpeg_encode(slide_pixels(4 * TILE, 0, rng)[0][:TILE, :TILE], level=90)}
    yy, xx = np.mgrid[0:TILES, 0:TILES]
    coarse = ((yy - 30) ** 2 + (xx - 35) ** 2 < 18 ** 2) | ((yy - 60) ** 2 + (xx - 55) ** 2 < 12 ** 2)

    def encoded(level: int):
        step, n = 2 ** level, -(-TILES // 2 ** level)
        for i in range(n):
            for j in range(n):
                block = coarse[i * step:(i + 1) * step, j * step:(j + 1) * step]
                yield tiles["tissue" if block.mean() > 0.5 else "glass"]

    side = TILE * TILES
    with tifffile.TiffWriter(path, bigtiff=True) as tif:
        tif.write(encoded(0), shape=(side, side, 3), dtype=np.uint8, tile=(TILE, TILE), compression="jpeg",
                  photometric="rgb", subifds=6)
        for level in range(1, 7):
            size = -(-side // 2 ** level)
            tif.write(encoded(level), shape=(size, size, 3), dtype=np.uint8, tile=(TILE, TILE), compression="jpeg",
                      photometric="rgb", subfiletype=1)


def main(folder: Path) -> None:
    slide = folder / "slide.tif"
    if not slide.exists():
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        write_slide(slide)
        print(f"wrote {slide} ({slide.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - started:.1f} s")
    side = tifffile.TiffFile(slide).series[0].shape[0]
    print(f"the slide: {side:,}² pixels, {side * side * 3 / 2**30:.1f} GiB decoded")
    # two classes of two copies each, a training and a validation image a class: copies, as the folder source refuses
    # one file listed twice (a link); a folder of their own, as slide_predict_memory.py keeps its data beside them
    data = folder / "classes"
    for name in ("a", "b"):
        for i in (1, 2):
            copy = data / name / f"{i}.tif"
            copy.parent.mkdir(parents=True, exist_ok=True)
            if not copy.is_file() or copy.is_symlink():  # a link left there replaced, never written through
                with open(slide, "rb") as source, atomic_write(copy, "wb") as target:
                    shutil.copyfileobj(source, target)
    run = folder / "run"
    subprocess.run([sys.executable, "-m", "app", "train", *RUN, f"data.path={data}", f"hydra.run.dir={run}",
                    "overwrite=true"],
                   check=True)
    summary = json.loads((run / "summary.json").read_text())
    row = list(csv.DictReader((run / "metrics.csv").open()))[-1]
    # the workers' figure holds their fork server's too (app/capacity/memory.py), as the plan has a line for it
    parts = summary["memory_plan"]["host"]
    planned = next(mib for part, mib in parts.items() if "worker processes" in part)
    server = next((mib for part, mib in parts.items() if "fork server" in part), 0.0)
    print(f"the workers (USS) with their fork server: {float(row['peak_workers_mb']):.1f} MiB measured, "
          f"{planned + server:.1f} MiB planned ({planned / 2:.1f} a worker, {server:.1f} the server)")
    print(f"the run: {summary['peak_memory_mb']:.0f} MiB measured, {summary['memory_plan']['host_peak_mib']:.0f} "
          "MiB predicted")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "outputs/slide_memory"))
