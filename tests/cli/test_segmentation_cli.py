"""A class a pixel through the real CLI. Texture regions (tests/segmentation_data.py, 48² PNGs and palette masks
with an ignore band), a run on two workers: it learns to a val mean IoU of 0.8 in 6 epochs where the masks
shuffled across images stay near chance (a SIGKILLed run of pairs resumed exactly:
tests/cli/test_slide_segmentation_cli.py); evaluate (IoU a class, the pixel confusion matrix, images.csv), predict
(masks that are the model's argmax), an ONNX export with its pixel parity. 6-band uint16 TIFF tiles with uint8
label rasters (255 no data) from a table: stats, a raw prepared copy that keeps the masks, a run on it to a val mean
IoU of 0.8, evaluate, predict."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from docs_runner import spawn_one_process_for
from PIL import Image
from segmentation_data import write_raster_set, write_texture_folder

TESTS = Path(__file__).resolve().parents[1]
SIDE = 48


def texture_data(made) -> list[str]:
    return ["data=folder", f"data.path={made.root / 'images'}", f"data.masks={made.root / 'masks'}",
            "data.task=segmentation", f"data.classes=[{','.join(made.class_names)}]", "data.ignore_index=255",
            f"data.image_size=[{SIDE},{SIDE}]", "data.batch_size=8"]


def texture_config(made) -> list[str]:
    return [*texture_data(made), "model.widths=[16,32,64]", "trainer.deterministic=true", "trainer.epochs=6"]


def rows_of(path: Path, *keys: str) -> list[tuple]:
    return [tuple(row[k] for k in keys) for row in csv.DictReader(path.open())]


def best(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())["best"]


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> SimpleNamespace:
    """Every command one after another in one process (tests/docs_runner.py)."""
    root = tmp_path_factory.mktemp("segmentation")
    textures = write_texture_folder(root / "textures", train=64, val=16, size=SIDE)
    shuffled = write_texture_folder(root / "shuffled", train=64, val=16, size=SIDE, shuffle_masks=True)
    rasters = write_raster_set(root / "rasters", n=48, size=SIDE)
    config, env = texture_config(textures), {**os.environ, "PYTHONPATH": str(TESTS)}
    run = root / "whole"
    table = ["data=table", f"data.table={rasters.table}", "data.columns.path=image", "data.columns.mask=mask",
             "data.columns.split=split"]
    raster = ["data.task=segmentation", f"data.classes=[{','.join(rasters.class_names)}]", "data.ignore_index=255",
              "data.channels=all", "data.dtype=uint16", f"data.image_size=[{SIDE},{SIDE}]", "data.batch_size=8"]
    here = "queue.workers=0"  # past the two runs that compare worker counts, batches built in the command's process
    done = spawn_one_process_for(
        ["train", *config, "queue.workers=2", "hydra.run.dir=whole"],
        ["train", *texture_config(shuffled), "trainer.epochs=2", here, "hydra.run.dir=shuffled"],
        ["evaluate", f"resume={run}", here],
        ["predict", f"resume={run}", f"input={textures.root / 'images' / 'val'}", here],
        ["export", f"resume={run}", "export.format=onnx", here],
        ["stats", *table, *raster, here, "hydra.run.dir=raster_stats"],
        ["prepare", *table, *raster, "prepare.out=copy", "prepare.format=raw"],  # the rasters' copy: trained on
        ["train", "data=prepared", "data.path=copy", *raster, "data.normalize.stats=raster_stats/stats.json",
         "model.widths=[16,32,64]", "augment=none", "trainer.epochs=6", here, "hydra.run.dir=raster"],
        ["evaluate", "resume=raster", here], ["predict", "resume=raster", f"input={rasters.root / 'tiles'}", here],
        ["predict", f"resume={run}", "input=copy"],  # the last: refused
        cwd=root, env=env)
    return SimpleNamespace(root=root, run=run, textures=textures, rasters=rasters, done=done[:-1],
                           refused=done[-1])


@pytest.mark.slow
def test_a_class_a_pixel_trains_learns_and_is_scored_predicted_and_exported(ran):
    root, run = ran.root, ran.run
    for result in ran.done:
        assert result.returncode == 0, (result.args, result.stdout[-3000:])
    # the pixel figures of every epoch
    keys = ("epoch", "loss", "miou", "iou_tumour", "val_loss", "val_miou", "val_iou_stroma", "val_dice",
            "val_pixel_accuracy")
    assert len(rows_of(run / "metrics.csv", *keys)) == 6
    # it learns the textures; the same images with each other's masks do not
    assert best(run)["monitor"] == "val_miou" and best(run)["mode"] == "max"
    assert best(run)["value"] >= 0.8 and best(root / "shuffled")["value"] <= 0.4, (best(run), best(root / "shuffled"))
    # evaluate: figures a class from the pixel confusion matrix, the ignore band left out, the worst image first
    scored = json.loads(next((run / "evaluate").glob("*/evaluation.json")).read_text())
    confusion = np.array(scored["confusion"])
    masks = [np.asarray(Image.open(mask)) for _, mask in ran.textures.of("val")]
    assert confusion.sum() == sum(int((m != 255).sum()) for m in masks) and scored["task"] == "segmentation"
    assert scored["mean_iou"] == pytest.approx(np.mean(scored["iou"]), abs=1e-9) and scored["mean_iou"] >= 0.8
    images = [float(row["mean_iou"]) for row in csv.DictReader(next((run / "evaluate").glob("*/images.csv")).open())]
    assert len(images) == len(masks) and images == sorted(images)
    # predict: a palette PNG an input, its indices the model's argmax; each class's share of the pixels
    import keras  # the test's own reading of model.keras, as a user's script would

    net = keras.saving.load_model(run / "model.keras")
    out = next((run / "predict").glob("*/predictions.csv")).parent
    rows = list(csv.DictReader((out / "predictions.csv").open()))
    assert len(rows) == len(masks)
    for row in rows:
        pixels = np.asarray(Image.open(row["path"]))[None]
        written = Image.open(out / row["mask"])
        assert written.mode == "P" and (out / "overlays" / Path(row["mask"]).name).is_file()
        argmax = np.asarray(net.predict_on_batch(pixels)).argmax(axis=-1)[0]
        assert np.array_equal(np.asarray(written), argmax)
        shares = [float(row[name]) for name in ran.textures.class_names]
        assert shares == pytest.approx(np.bincount(argmax.ravel(), minlength=3) / argmax.size, abs=1e-6)
    # export: ONNX's scores a pixel agree with Keras's
    exported = json.loads((run / "export" / "onnx" / "export.json").read_text())
    assert exported["parity"]["passed"] and exported["parity"]["pixel_agreement"] >= 0.999


@pytest.mark.slow
def test_a_prepared_copy_keeps_the_masks_and_trains_on_them(ran):
    manifest = json.loads((ran.root / "copy" / "manifest.json").read_text())
    assert manifest["task"] == "segmentation" and manifest["ignore_index"] == 255 and manifest["dtype"] == "uint16"
    assert json.loads((ran.root / "raster" / "split.json").read_text())["source"] != "table"  # trained on the copy
    # predict writes masks of image files: a copy is refused, naming what to give
    assert ran.refused.returncode != 0 and "input=<an image file, or a folder of images>" in ran.refused.stdout


@pytest.mark.slow
def test_six_band_uint16_tiles_with_label_rasters_learn_from_a_table(ran):
    stats = json.loads((ran.root / "raster_stats" / "stats.json").read_text())
    assert len(stats["bands"]) == 6 and stats["dtype"] == "uint16"
    run = ran.root / "raster"
    assert best(run)["value"] >= 0.8, best(run)
    scored = json.loads(next((run / "evaluate").glob("*/evaluation.json")).read_text())
    assert scored["mean_iou"] >= 0.8 and scored["ignore_index"] == 255
    out = next((run / "predict").glob("*/predictions.csv")).parent
    rows = list(csv.DictReader((out / "predictions.csv").open()))
    assert len(rows) == len(ran.rasters.samples) and not any(row["error"] for row in rows)
    assert all(np.asarray(Image.open(out / row["mask"])).shape == (SIDE, SIDE) for row in rows)
