"""Segmenting slides through the real CLI: six small JPEG-tiled pyramids whose regions of two textures lie on glass
(tests/slides.py), annotated once as QuPath's GeoJSON polygons (with holes; data.masks_background) and once as label
rasters at a quarter of each slide. Each annotation trains to a val mean IoU of 0.8; a polygons run SIGKILLed
mid-epoch on one worker resumes to the rows of an uninterrupted run on two. `evaluate` scores each validation slide
whole; `predict` writes each slide's classes as a pyramid tifffile reads at every level, matching the drawn regions,
with one class's probability beside it, `plan` counting what that adds; with overlapping, blended tiles the classes
change no more often across a tile's border than inside one, and side by side without blending they do (the
negative control)."""

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest
import tifffile
from docs_runner import spawn_one_process_for, train_killed
from slides import ANNOTATED_CLASSES, write_annotated_slides

TESTS = Path(__file__).resolve().parents[1]
PATCH = 32


def rows_of(path: Path, *keys: str) -> list[tuple]:
    return [tuple(row[k] for k in keys) for row in csv.DictReader(path.open())]


def iou(predicted: np.ndarray, truth: np.ndarray, classes: int) -> float:
    scores = [((predicted == c) & (truth == c)).sum() / max(((predicted == c) | (truth == c)).sum(), 1)
              for c in range(classes)]
    return float(np.mean(scores))


def seams(classes: np.ndarray, borders: list[int]) -> tuple[float, float]:
    """How often a pixel's class differs from its left neighbour's: across the tiles' borders, and everywhere else."""
    changed = classes[:, 1:] != classes[:, :-1]
    across = np.zeros(changed.shape[1], bool)
    across[[b - 1 for b in borders if 0 < b < classes.shape[1]]] = True
    return float(changed[:, across].mean()), float(changed[:, ~across].mean())


def tile_edges(stride: int, side: int = 512) -> list[int]:
    """Where a row of tiles begins and ends: from 0 by `stride`, the last flush with the slide's edge."""
    lefts = [*range(0, side - PATCH + 1, stride)]
    lefts += [side - PATCH] if lefts[-1] != side - PATCH else []
    return sorted({edge for left in lefts for edge in (left, left + PATCH)})


@pytest.mark.slow
def test_slides_segment_from_polygons_and_rasters_resume_exactly_and_predict_a_seamless_pyramid(tmp_path):
    drawn = write_annotated_slides(tmp_path, train=4, val=2, side=512)
    config = ["data=folder", f"data.path={tmp_path / 'slides'}", "data.task=segmentation",
              f"data.classes=[{','.join(ANNOTATED_CLASSES)}]", f"data.patches.size=[{PATCH},{PATCH}]",
              "data.patches.level=0", "data.patches.per_image=32", f"data.image_size=[{PATCH},{PATCH}]",
              "data.batch_size=16", "model.widths=[8,16]", "trainer.deterministic=true",
              "trainer.checkpoint_every_steps=4", "trainer.epochs=5"]
    # the polygons' runs augment each pair (a crop and a flip move the mask with the patch); the rasters' none
    polygons = [*config, f"data.masks={tmp_path / 'polygons'}", "data.masks_background=glass"]
    rasters = [*config, f"data.masks={tmp_path / 'rasters'}", "augment=none", "queue.workers=2",
               "hydra.run.dir=rasters"]
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    val = tmp_path / "slides" / "val"
    run = train_killed([*polygons, "queue.workers=1"], cwd=tmp_path, env=env)
    done = spawn_one_process_for(
        ["train", *polygons, "queue.workers=2", "hydra.run.dir=whole"], ["train", f"resume={run}"],
        ["train", *rasters], ["evaluate", "resume=rasters"], ["evaluate", f"resume={run}"],
        ["predict", f"resume={run}", f"input={val}", "predict.probability=dots"],
        ["predict", f"resume={run}", f"input={val}", "predict.overlap=0", "predict.blend=mean"],
        ["plan", *polygons, "hydra.run.dir=plan"], cwd=tmp_path, env=env)
    for result in done:
        assert result.returncode == 0, (result.args, result.stdout[-3000:])
    # exact resume, one worker against two
    keys = ("epoch", "loss", "miou", "val_loss", "val_miou")
    assert rows_of(run / "metrics.csv", *keys) == rows_of(tmp_path / "whole" / "metrics.csv", *keys)
    # each annotation learns the textures
    for trained in (run, tmp_path / "rasters"):
        assert float(rows_of(trained / "metrics.csv", "val_miou")[-1][0]) >= 0.8, trained
    # evaluate: each validation slide whole, and all of them
    for trained in (run, tmp_path / "rasters"):
        evaluated = json.loads(next((trained / "evaluate").glob("*/evaluation.json")).read_text())
        assert [Path(s["path"]).name for s in evaluated["slides"]] == ["val-0.tif", "val-1.tif"]
        assert evaluated["mean_iou"] >= 0.8 and all(s["mean_iou"] >= 0.7 for s in evaluated["slides"]), evaluated
    # plan: what predicting a slide whole adds, its band of tile rows across the widest validation slide
    planned = json.loads((tmp_path / "plan" / "plan.json").read_text())["predict_slides"]
    band = PATCH * 512 * (3 + 1) * 4 * 2 / 2**20  # scores and weights, and a finished band's
    assert planned["band_mib"] == pytest.approx(band, abs=0.05) and planned["map_width"] == 512
    assert planned["host_peak_mib"] > planned["band_mib"]
    # predict: a pyramid a slide, every level read, matching the drawn regions; its probability beside it
    blended, plain = sorted((run / "predict").iterdir())  # in the order they ran
    rows = list(csv.DictReader((blended / "predictions.csv").open()))
    assert [Path(row["path"]).name for row in rows] == ["val-0.tif", "val-1.tif"] and not any(r["error"] for r in rows)
    gaps = []
    for row in rows:
        with tifffile.TiffFile(blended / row["mask"]) as tif:
            levels = [level.asarray() for level in tif.series[0].levels]
            assert tif.is_ome and tif.pages.first.is_tiled
        truth = drawn[Path(row["path"])]
        assert levels[0].shape == truth.shape and iou(levels[0], truth, 3) >= 0.8
        assert float(row["dots_um2"]) == pytest.approx((levels[0] == 2).sum() * 0.5 ** 2, abs=0.06)
        probability = tifffile.imread(blended / row["probability"])
        assert probability[levels[0] == 2].mean() > 3 * probability[levels[0] == 1].mean()  # 203 against 50 here
        side_by_side = tifffile.imread(plain / row["mask"])
        gaps.append((seams(levels[0], tile_edges(PATCH * 3 // 4)), seams(side_by_side, tile_edges(PATCH))))
    (blend_across, blend_inside), (plain_across, plain_inside) = np.mean([g[0] for g in gaps], axis=0), \
        np.mean([g[1] for g in gaps], axis=0)
    assert blend_across <= 1.5 * blend_inside + 0.002, gaps
    assert plain_across > 1.5 * plain_inside, gaps
