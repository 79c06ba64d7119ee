"""Six-band 16-bit tiled TIFFs through the real CLI, as scans and aerial tiles come: the class shows only in bands 4
and 5, and only 150 levels of 65,535 apart (below 1/256 of the range: 8 bits would lose it). `stats` against numpy's
figures; `plan`'s ring of 2 bytes × 6 bands; trained with one worker, it learns (val accuracy ≥ 0.9) where
bands 0–2 alone stay at chance (the negative control); evaluate, predict, a raw prepared copy trained on, and an ONNX
export taking uint16, all in one process. In `make test-all`: SIGKILLed inside epoch 2 and resumed, to the metrics
of the run uninterrupted."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from docs_runner import spawn_one_process_for, train_killed

TESTS = Path(__file__).resolve().parents[1]
SHAPE = (40, 48, 6)


def write_tiles(folder: Path, per_class: int = 48) -> None:
    """Noise of 1,000 to 1,199 in every band; `water` 150 higher in bands 4 and 5."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(("field", "water")):
        (folder / name).mkdir(parents=True)
        for i in range(per_class):
            bands = rng.integers(1000, 1200, SHAPE, dtype=np.uint16)
            bands[:, :, 4:] += np.uint16(150 * c)
            tifffile.imwrite(folder / name / f"{i:03d}.tif", bands, photometric="minisblack", planarconfig="contig",
                             tile=(16, 16),
                             compression="lzw")


def rows_of(path: Path, *keys: str) -> list[tuple]:
    return [tuple(row[k] for k in keys) for row in csv.DictReader(path.open())]


def configs(tmp_path: Path) -> tuple[list[str], list[str]]:
    """The data's keys, and train's: normalised by the figures `stats` writes into ./stats."""
    data = ["data=folder", f"data.path={tmp_path / 'tiles'}", "data.channels=all", "data.dtype=uint16",
            f"data.image_size=[{SHAPE[0]},{SHAPE[1]}]", "data.batch_size=8", "queue.workers=1"]
    return data, [*data, f"data.normalize.stats={tmp_path / 'stats' / 'stats.json'}", "model.widths=[8,16]",
                  "augment=none", "trainer.epochs=2", "trainer.deterministic=true", "trainer.checkpoint_every_steps=2"]


@pytest.mark.slow
def test_six_band_uint16_tiles_stats_train_evaluate_predict_prepare_and_export(tmp_path):
    write_tiles(tmp_path / "tiles")
    data, train = configs(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    run = tmp_path / "run"
    done = spawn_one_process_for(
        ["stats", *data, "hydra.run.dir=stats"], ["train", *train, f"hydra.run.dir={run}"],
        ["train", *(a for a in train if a != "queue.workers=1"), "queue.workers=auto", "data.channels=[0,1,2]",
         "data.normalize.stats=null", "hydra.run.dir=bands012"],  # auto: the probe builds 3 bands of uint16 too
        ["evaluate", f"resume={tmp_path / 'bands012'}"],  # at chance: its mistakes drawn, 3 bands of uint16
        ["plan", *train, "queue.max_size=2", "hydra.run.dir=plan"],
        ["evaluate", f"resume={run}"], ["predict", f"resume={run}", f"input={tmp_path / 'tiles' / 'water'}"],
        ["prepare", *data, "prepare.format=raw", "prepare.out=copy"],
        ["train", "data=prepared", "data.path=copy", *train[2:], "trainer.epochs=1", "hydra.run.dir=on_copy"],
        ["export", f"resume={run}", "export.format=onnx"], cwd=tmp_path, env=env)
    for result in done:
        assert result.returncode == 0, (result.args, result.stdout[-3000:])
    # stats: numpy's figures of the training split's pixels (the resize to their own size changes none)
    split = json.loads((run / "split.json").read_text())
    pixels = np.stack([tifffile.imread(tmp_path / "tiles" / rel) for rel in split["train"]]).reshape(-1, SHAPE[2])
    written = json.loads((tmp_path / "stats" / "stats.json").read_text())
    assert written["dtype"] == "uint16" and written["images"] == len(split["train"])
    for band, figures in enumerate(written["bands"]):
        values = pixels[:, band]
        assert abs(figures["mean"] - values.mean()) < 1e-3 * 65535 and abs(figures["std"] - values.std()) < 1e-3 * 65535
        assert (figures["min"], figures["max"]) == (values.min(), values.max())
        assert figures["p1"] == np.percentile(values, 1, method="inverted_cdf")
        assert figures["p99"] == np.percentile(values, 99, method="inverted_cdf")
    # the ring: 2 slots of 8 × 40 × 48 × 6 bands × 2 bytes, in the plan and in the run
    ring = 2 * 8 * SHAPE[0] * SHAPE[1] * SHAPE[2] * 2
    planned = json.loads(next((tmp_path / "plan").glob("plan.json")).read_text())
    assert planned["host"]["the ring (2 slot(s) of one uint16 batch)"] == round(ring / 2**20, 1)
    assert json.loads((run / "summary.json").read_text())["queue_bytes"] == ring
    # it learns from bands 4 and 5; bands 0 to 2 alone do not
    assert float(rows_of(run / "metrics.csv", "val_accuracy")[-1][0]) >= 0.9
    assert float(rows_of(tmp_path / "bands012" / "metrics.csv", "val_accuracy")[-1][0]) <= 0.6
    assert json.loads((tmp_path / "bands012" / "summary.json").read_text())["queue_auto"]["workers"] >= 1
    scored = json.loads(next((run / "evaluate").glob("*/evaluation.json")).read_text())
    assert scored["accuracy"] >= 0.9
    guessed = next((tmp_path / "bands012" / "evaluate").glob("*/"))
    assert json.loads((guessed / "evaluation.json").read_text())["accuracy"] < 1.0
    assert (guessed / "misclassified.png").stat().st_size > 0
    predicted = list(csv.DictReader(next((run / "predict").glob("*/predictions.csv")).open()))
    assert len(predicted) == 48 and sum(row["class"] == "water" for row in predicted) >= 43
    copy = json.loads((tmp_path / "copy" / "manifest.json").read_text())
    assert (copy["dtype"], copy["bands"], copy["format"]) == ("uint16", 6, "raw")
    assert json.loads((tmp_path / "on_copy" / "summary.json").read_text())["status"] == "completed"
    exported = json.loads((run / "export" / "onnx" / "export.json").read_text())
    described = json.loads((run / "export" / "onnx" / "preprocessing.json").read_text())
    assert exported["parity"]["passed"] and exported["parity"]["top1_agreement"] == 1.0
    assert described["input"]["dtype"] == "uint16" and described["input"]["bands"] == 6
    assert described["normalisation"]["mode"] == "standard"


@pytest.mark.slow
@pytest.mark.exhaustive
def test_six_band_uint16_tiles_resumed_after_a_kill_train_as_uninterrupted(tmp_path):
    """Trained with one worker, SIGKILLed inside epoch 2 and resumed: the metrics rows of the run uninterrupted.
    Covered in `make test` by: exact resumes after a kill (tests/cli/test_resume_cli.py, a table's in
    tests/cli/test_table_cli.py) and these tiles trained (the test above)."""
    write_tiles(tmp_path / "tiles")
    data, train = configs(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    (stats,) = spawn_one_process_for(["stats", *data, "hydra.run.dir=stats"], cwd=tmp_path, env=env)
    assert stats.returncode == 0, stats.stdout[-3000:]
    run = train_killed(train, cwd=tmp_path, env=env)
    for result in spawn_one_process_for(["train", *train, "hydra.run.dir=whole"], ["train", f"resume={run}"],
                                        cwd=tmp_path, env=env):
        assert result.returncode == 0, (result.args, result.stdout[-3000:])
    keys = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy")
    assert rows_of(run / "metrics.csv", *keys) == rows_of(tmp_path / "whole" / "metrics.csv", *keys)
    assert len(rows_of(run / "metrics.csv", *keys)) == 2


@pytest.mark.slow
def test_stats_leaves_no_data_out_of_the_resized_pixels_too(tmp_path):
    """GeoTIFFs whose left half is GDAL_NODATA (0) beside values of 13,000 to 13,999, resized 40×48 → 15×13: a
    linear resize would blend the zeros into the edge (a min far below 13,000); no value counted may be one."""
    rng = np.random.default_rng(1)
    for c, name in enumerate(("a", "b")):
        (tmp_path / "geo" / name).mkdir(parents=True)
        for i in range(3):
            bands = rng.integers(13_000, 14_000, (40, 48, 2), dtype=np.uint16)
            bands[:, : 17 + 3 * i + c] = 0
            tifffile.imwrite(tmp_path / "geo" / name / f"{i}.tif", bands, photometric="minisblack",
                             extratags=[(42113, "s", 0, "0", True)])
    data = ["data=folder", f"data.path={tmp_path / 'geo'}", "data.channels=all", "data.dtype=uint16",
            "data.image_size=[15,13]", "data.batch_size=2", "data.val_fraction=0.34", "queue.workers=1"]
    stats = subprocess.run([sys.executable, "-m", "app", "stats", *data, "hydra.run.dir=stats"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert stats.returncode == 0, stats.stderr[-3000:]
    written = json.loads((tmp_path / "stats" / "stats.json").read_text())
    assert written["nodata"] == [0.0]
    for figures in written["bands"]:
        assert figures["pixels"] > 0 and 13_000 <= figures["min"] and figures["max"] < 14_000
        assert 13_400 < figures["mean"] < 13_600
