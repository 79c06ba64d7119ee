"""A 40,960² slide (4.7 GiB decoded; benchmarks/slide_memory.py writes it) segmented whole by `predict`: the predict
process's peak memory against `plan`'s figure for predicting a slide whole, and the output pyramid opened at every
level; then `bench` times the same slide's prediction by the app (`slide_predict`) against a hand-written Keras loop
(`keras_slide_loop`), memory not sampled; last, what bounds them: the model alone on as many tiles, and the tiles'
reads with and without the chunks a worker keeps. The slide's two discs of tissue are annotated as QuPath's GeoJSON;
a short run on its patches (level 2, 256²) gives the model.

Usage: .venv/bin/python benchmarks/slide_predict_memory.py [folder]   (default outputs/slide_memory, as slide_memory.py)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tifffile

from app.data.slides.regions import close_open_files, read_region
from app.frameworks import load_keras
from app.inference.slide_masks import tiling_of
from app.schema.data import PatchesConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slide_memory import TILE, write_slide  # noqa: E402 - the same 40,960² slide

DISCS = ((35, 30, 18), (55, 60, 12))  # (x, y, radius) in 512² tiles: slide_memory.py's tissue
# min_foreground=0: every tile of the 10,240² map at level 2 (the slide's lowest levels, which a level-2 patch's
# foreground mask is made from, repeat one glass tile: no tissue would be found there)
RUN = ["data=folder", "data.task=segmentation", "data.classes=[glass,tissue]", "data.masks_background=glass",
       "data.patches.size=[256,256]", "data.patches.level=2", "data.patches.min_foreground=0",
       "data.patches.per_image=64", "data.image_size=[256,256]", "data.batch_size=16", "model.widths=[8,16]",
       "trainer.epochs=1", "trainer.steps_per_epoch=4", "trainer.validation_steps=2", "logger=none",
       "print_config=false"]


def disc(x: float, y: float, radius: float, points: int = 64) -> list:
    angles = np.linspace(0, 2 * np.pi, points, endpoint=False)
    ring = [[round(x + radius * np.cos(a), 1), round(y + radius * np.sin(a), 1)] for a in angles]
    return [ring + ring[:1]]


def write_data(folder: Path, slide: Path) -> Path:
    """slides/{train,val}/<name>.tif linking to the slide, polygons/{train,val}/<name>.geojson its two discs."""
    geojson = {"type": "FeatureCollection", "features": [
        {"type": "Feature", "geometry": {"type": "Polygon", "coordinates": disc(x * TILE, y * TILE, r * TILE)},
         "properties": {"classification": {"name": "tissue"}}} for x, y, r in DISCS]}
    for split in ("train", "val"):
        link = folder / "data" / "slides" / split / f"{split}.tif"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(slide.resolve())
        polygons = folder / "data" / "polygons" / split / f"{split}.geojson"
        polygons.parent.mkdir(parents=True, exist_ok=True)
        polygons.write_text(json.dumps(geojson))
    return folder / "data"


def main(folder: Path) -> None:
    slide = folder / "slide.tif"
    if not slide.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_slide(slide)
    side = tifffile.TiffFile(slide).series[0].shape[0]
    data = write_data(folder, slide)
    config = [*RUN, f"data.path={data / 'slides'}", f"data.masks={data / 'polygons'}"]
    run, plan = folder / "segment_run", folder / "segment_plan"
    subprocess.run([sys.executable, "-m", "app", "train", *config, f"hydra.run.dir={run}", "overwrite=true"],
                   check=True)
    subprocess.run([sys.executable, "-m", "app", "plan", *config, f"hydra.run.dir={plan}"], check=True,
                   capture_output=True)
    planned = json.loads((plan / "plan.json").read_text())["predict_slides"]
    started = time.perf_counter()
    # GNU time's %M: the predict process's own peak resident size (KiB), its workers apart
    done = subprocess.run(["/usr/bin/time", "-f", "peak %M", sys.executable, "-m", "app", "predict", f"resume={run}",
                           f"input={data / 'slides' / 'val'}"], check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    peak = int(done.stderr.strip().splitlines()[-1].split()[-1]) / 1024
    out = max((run / "predict").iterdir(), key=lambda path: path.stat().st_mtime)
    rows = (out / "predictions.csv").read_text().splitlines()
    with tifffile.TiffFile(out / "masks" / "val.tif") as tif:
        levels = [level.shape for level in tif.series[0].levels]
        smallest = tif.series[0].levels[-1].asarray()
    print(f"the slide: {side:,}² pixels, {side * side * 3 / 2**30:.1f} GiB decoded")
    print(f"predict: {seconds:.0f} s, its process's peak {peak:,.0f} MiB; plan's figure for predicting a slide whole "
          f"{planned['host_peak_mib']:,.0f} MiB (its band of rows {planned['band_mib']:.0f} MiB, a map "
          f"{planned['map_width']:,} wide)")
    print(f"the pyramid: {len(levels)} levels {levels}, the smallest's classes {np.bincount(smallest.ravel())}")
    print(rows[0], rows[1], sep="\n")
    bench = folder / "segment_bench"
    subprocess.run([sys.executable, "-m", "app", "bench", *config, "bench.modes=[slide_predict,keras_slide_loop]",
                    "bench.memory=false", "bench.warmup=2", f"hydra.run.dir={bench}"], check=True, capture_output=True)
    benched = json.loads((bench / "bench.json").read_text())
    for mode in ("slide_predict", "keras_slide_loop"):
        result = benched["results"][mode]
        print(f"{mode}: {result['images_per_s']:.1f} tiles/s ({result['tiles']} tiles)")
    print(f"slide_predict against keras_slide_loop: {benched['derived']['slide_predict_vs_keras_slide_loop']:.2f}×")
    time_parts(run, data / "slides" / "val" / "val.tif")


def time_parts(run: Path, slide: Path) -> None:
    """What bounds the two: the run's model alone on as many tiles, and the tiles' reads in one process, with and
    without the chunks a worker keeps (data.patches.chunk_cache_mib)."""
    tiling = tiling_of(str(slide), PatchesConfig(size=[256, 256], level=2, min_foreground=0.0), 0.25)
    corners = [tiling.corner(top, left) for top, lefts in tiling.rows for left in lefts]
    scale = tiling.layout.slide.downsample(2)
    for budget in (0, 64):
        close_open_files()
        started = time.perf_counter()
        for y, x in corners:
            read_region(tiling.layout.slide, 2, (int(y / scale), int(x / scale)), (256, 256), cache_bytes=budget << 20)
        print(f"reading the {len(corners)} tiles in one process, {budget} MiB of chunks kept: "
              f"{time.perf_counter() - started:.1f} s")
    net = load_keras().saving.load_model(run / "model.keras", compile=False)
    batch = np.zeros((16, 256, 256, 3), np.uint8)
    net.predict_on_batch(batch)
    started = time.perf_counter()
    for _ in range(-(-len(corners) // 16)):
        net.predict_on_batch(batch)
    print(f"the model alone on as many tiles (predict_on_batch, batches of 16): {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("outputs/slide_memory"))
