"""Training on patches of slides through the real CLI: eight small JPEG-tiled pyramids (tests/slides.py), "tissue"
blobs whose texture says the class on pale glass. It learns from the patches and not from shuffled labels; a run
SIGKILLed mid-epoch on one worker resumes to the rows of an uninterrupted run on two, patch for patch; sampled patches
fall on the tissue; evaluate and predict give a row an image, and predict's heatmap lies on the tissue. Prepared once
(the grid of patches), the copy trains as well, and evaluate and predict of that run give their rows an image; bench
times the loader beside a hand-written region reader, and on the copy. Aperio
SVS slides train through OpenSlide (the slides extra); an install without it refuses them naming the extra."""

import csv
import json
import os
import re
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
from docs_runner import spawn_one_process_for, train_killed
from slides import write_slides
from venvs import venv_without

TESTS = Path(__file__).resolve().parents[1]
PATCH, EXTENT = 32, 64  # a patch's side at level 1, and what it covers at level 0


def rows_of(path: Path, *keys: str) -> list[tuple]:
    return [tuple(row[k] for k in keys) for row in csv.DictReader(path.open())]


def on_tissue(places: list[str], paths: list[Path], masks: dict) -> np.ndarray:
    """Each sampled patch's share of drawn tissue ("image:x:y" in level-0 pixels)."""
    shares = []
    for place in places:
        image, x, y = (int(v) for v in place.split(":"))
        shares.append(masks[paths[image]][y:y + EXTENT, x:x + EXTENT].mean())
    return np.array(shares)


@pytest.mark.slow
def test_patches_learn_resume_exactly_on_any_workers_stay_on_tissue_and_predict_a_heatmap(tmp_path):
    masks = write_slides(tmp_path / "slides", per_class=4, side=1024)
    shuffled = tmp_path / "shuffled"  # the same slides, their classes swapped for half of each
    for i, path in enumerate(sorted(masks)):
        (shuffled / ("dots" if i % 2 else "stripes")).mkdir(parents=True, exist_ok=True)
        os.symlink(path, shuffled / ("dots" if i % 2 else "stripes") / f"{path.parent.name}-{path.name}")
    config = ["data=folder", f"data.path={tmp_path / 'slides'}", f"data.patches.size=[{PATCH},{PATCH}]",
              "data.patches.level=1", "data.patches.per_image=24", f"data.image_size=[{PATCH},{PATCH}]",
              "data.batch_size=16", "model.widths=[8,16]", "augment=none", "trainer.deterministic=true",
              "trainer.record_samples=true", "trainer.checkpoint_every_steps=2", "trainer.epochs=3"]
    write_slides(tmp_path / "svs", per_class=3, side=512, svs=True)
    svs = ["data=folder", f"data.path={tmp_path / 'svs'}", f"data.patches.size=[{PATCH},{PATCH}]",
           "data.patches.mpp=1.0", "data.patches.per_image=8", *config[5:8], "trainer.epochs=1"]
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    data = config[:6] + ["augment=none"]  # what prepare reads: the data and its transforms
    on_copy = ["data=prepared", "data.path=copy", *config[5:], "trainer.epochs=2", "hydra.run.dir=on_copy"]
    run = train_killed([*config, "queue.workers=1"], cwd=tmp_path, env=env)
    done = spawn_one_process_for(
        ["train", *config, "queue.workers=2", "hydra.run.dir=whole"], ["train", f"resume={run}"],
        ["train", *config, f"data.path={shuffled}", "queue.workers=1", "hydra.run.dir=shuffled"],
        ["evaluate", f"resume={run}"], ["predict", f"resume={run}", f"input={tmp_path / 'slides' / 'dots'}"],
        ["prepare", *data, "prepare.out=copy"], ["train", *on_copy],
        ["evaluate", "resume=on_copy"], ["predict", "resume=on_copy", f"input={tmp_path / 'slides' / 'dots'}"],
        ["train", *svs, "hydra.run.dir=svs_run"],
        ["bench", *data, "data.batch_size=16", "bench.modes=[loader,keras_regions]", "bench.batches=2",
         "bench.warmup=1", "bench.memory=false", "bench.prepared=[copy]", "hydra.run.dir=bench"], cwd=tmp_path, env=env)
    for result in done:
        assert result.returncode == 0, (result.args, result.stdout[-3000:])
    # exact resume, one worker against two: the same patches (samples.csv) and the same rows
    keys = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy")
    assert rows_of(run / "metrics.csv", *keys) == rows_of(tmp_path / "whole" / "metrics.csv", *keys)
    assert rows_of(run / "samples.csv", "step", "indices", "patches") == \
        rows_of(tmp_path / "whole" / "samples.csv", "step", "indices", "patches")
    # it learns from the texture of the tissue, and not from shuffled labels
    learned = [float(v) for (v,) in rows_of(run / "metrics.csv", "val_accuracy")]
    chance = [float(v) for (v,) in rows_of(tmp_path / "shuffled" / "metrics.csv", "val_accuracy")]
    assert learned[-1] >= 0.85 and max(chance) <= 0.6, (learned, chance)
    # the split is by image; sampled patches lie on the drawn tissue (≤ 5 % on glass)
    split = json.loads((run / "split.json").read_text())
    assert split["patches"]["split_by"] == "image" and not set(split["train"]) & set(split["val"])
    train = [tmp_path / "slides" / name for name in split["train"]]
    places = [p for (row,) in rows_of(run / "samples.csv", "patches") for p in row.split()]
    shares = on_tissue(places, train, masks)
    assert len(places) == 3 * 144 and np.mean(shares < 0.25) <= 0.05, np.mean(shares < 0.25)
    # evaluate: patch-level figures and an image-level row an image
    evaluated = json.loads(next((run / "evaluate").glob("*/evaluation.json")).read_text())
    assert evaluated["image_level"]["images"] == len(split["val"]) and evaluated["image_level"]["accuracy"] == 1.0
    assert evaluated["samples"] == split["patches"]["val"]["patches"]
    # predict: a row an image from its patches, and heatmaps whose bright cells lie on the tissue
    out = next((run / "predict").glob("*"))
    predicted = list(csv.DictReader((out / "predictions.csv").open()))
    assert [row["class"] for row in predicted] == ["dots"] * 4 and all(int(row["patches"]) > 10 for row in predicted)
    for row in predicted:
        heat = cv2.imread(str(Path(row["heatmap"]).with_suffix(".heat.png")), cv2.IMREAD_GRAYSCALE)
        drawn = cv2.resize(masks[Path(row["path"])].astype(np.uint8), heat.shape[::-1], interpolation=cv2.INTER_AREA)
        bright, tissue = heat >= 128, drawn > 0
        assert (bright & tissue).sum() / (bright | tissue).sum() >= 0.5
        assert (np.roll(bright, heat.shape[0] // 2, axis=0) & tissue).sum() / (bright | tissue).sum() < 0.5

    # the copy: its patches trained on as well, evaluate and predict by image as on the slides
    copied = [float(v) for (v,) in rows_of(tmp_path / "on_copy" / "metrics.csv", "val_accuracy")]
    assert copied[-1] >= 0.85, copied
    on_copy = json.loads(next((tmp_path / "on_copy" / "evaluate").glob("*/evaluation.json")).read_text())
    assert on_copy["image_level"]["images"] == len(split["val"]) and on_copy["image_level"]["accuracy"] == 1.0
    assert on_copy["samples"] == split["patches"]["val"]["patches"]  # the same grid, read once at prepare
    rows = list(csv.DictReader(next((tmp_path / "on_copy" / "predict").glob("*/predictions.csv")).open()))
    assert [row["class"] for row in rows] == ["dots"] * 4 and all(int(row["patches"]) > 10 for row in rows)

    # SVS slides: every one read by OpenSlide, trained through the CLI
    svs_split = json.loads((tmp_path / "svs_run" / "split.json").read_text())["patches"]
    assert svs_split["read_by"] == {"openslide": 6, "tifffile": 0}
    assert len(rows_of(tmp_path / "svs_run" / "metrics.csv", "val_accuracy")) == 1
    # without the extra: OpenSlide asked for, and refused in one paragraph naming it
    python = venv_without(tmp_path / "no-slides", re.compile(r"^openslide.*", re.I)).parents[2] / "bin" / "python"
    refused = subprocess.run([str(python), "-m", "app", "preview", *svs[:6], "data.patches.reader=openslide"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "add the slides extra, pip install -e '.[slides]'" in refused.stderr, \
        refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1

    # bench: the loader and the hand-written region reader on the slides, the loader on the copy (no regions there)
    benched = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert set(benched["results"]) == {"loader", "keras_regions", "loader@copy"}, benched["results"]
    assert all("error" not in row for row in benched["results"].values())
    assert benched["derived"]["loader_vs_keras_regions"] > 0
