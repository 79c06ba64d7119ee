"""data=table through every command, the real CLI: a CSV of ids without an extension, a patient a
few rows (a grouped split), one class 3 times the other drawn balanced (data.sampling), trained
with one worker, SIGKILLed inside epoch 2 and resumed to the metrics and samples of the run
uninterrupted with two; then evaluate split=test, predict, prepare a copy and train on it (balanced
too), export to ONNX (export's own parity check against Keras)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest
from docs_runner import spawn_one_process_for, train_killed
from PIL import Image

TESTS = Path(__file__).resolve().parents[1]
ROWS = 64


def write_scans(folder: Path) -> Path:
    """ROWS 40×48 JPEGs named by zero-padded ids, a malignant one in four, four rows a patient; their table."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    rows = ["image_id,diagnosis,patient"]
    for i in range(ROWS):
        pixels = rng.integers(0, 256, (40, 48, 3), np.uint8)
        pixels[..., int(i % 4 == 0)] = 255  # a class the model can learn
        Image.fromarray(pixels).save(folder / f"{i:06d}.jpg")
        rows.append(f"{i:06d},{'malignant' if i % 4 == 0 else 'benign'},p{i // 4}")
    table = folder / "train.csv"
    table.write_text("\n".join(rows) + "\n")
    return table


def rows_of(path: Path, *keys: str) -> list[tuple]:
    return [tuple(row[k] for k in keys) for row in csv.DictReader(path.open())]


@pytest.mark.slow
def test_a_table_trains_resumes_after_a_kill_evaluates_predicts_prepares_and_exports(tmp_path):
    table = write_scans(tmp_path / "scans")
    config = ["data=table", f"data.table={table}", "data.columns.path=image_id", "data.columns.label=diagnosis",
              "data.path_format={}.jpg", "data.columns.group=patient", "data.test_fraction=0.2",
              "data.image_size=[24,24]", "data.batch_size=4", "model.widths=[8]", "trainer.epochs=2",
              "trainer.deterministic=true", "trainer.record_samples=true", "trainer.checkpoint_every_steps=2",
              "data.sampling=balanced", "queue.workers=1"]
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    run = train_killed(config, cwd=tmp_path, env=env)
    done = spawn_one_process_for(
        ["train", *config, "queue.workers=2", "hydra.run.dir=whole"], ["train", f"resume={run}"],
        ["evaluate", f"resume={run}", "split=test"], ["predict", f"resume={run}", f"input={table.parent}"],
        ["prepare", *config[:8], "prepare.out=copy"],
        ["train", "data=prepared", "data.path=copy", *config[7:], "hydra.run.dir=on_copy"],
        ["export", f"resume={run}", "export.format=onnx"], cwd=tmp_path, env=env)
    for result in done:
        assert result.returncode == 0, (result.args, result.stdout[-3000:])
    split = json.loads((run / "split.json").read_text())
    assert split["source"] == "table" and split["class_names"] == ["benign", "malignant"]
    patients = [{int(Path(rel).stem) // 4 for rel in split[name]} for name in ("train", "val", "test")]
    assert not (patients[0] & patients[1] or patients[0] & patients[2] or patients[1] & patients[2])
    # the resumed run is the uninterrupted one: every metrics row and every sample
    keys = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy")
    assert rows_of(run / "metrics.csv", *keys) == rows_of(tmp_path / "whole" / "metrics.csv", *keys)
    samples = ("step", "indices")
    assert rows_of(run / "samples.csv", *samples) == rows_of(tmp_path / "whole" / "samples.csv", *samples)
    assert len(rows_of(run / "metrics.csv", *keys)) == 2
    drawn = [int(i) for _, indices in rows_of(run / "samples.csv", *samples) for i in indices.split()]
    assert len(drawn) > len(set(drawn))  # drawn with replacement
    assert "sampling: balanced: each epoch draws its" in (run / "train.log").read_text()
    scored = json.loads(next((run / "evaluate").glob("*/evaluation.json")).read_text())
    assert scored["split"] == "test" and scored["samples"] == len(split["test"]) > 0
    predictions = rows_of(next((run / "predict").glob("*/predictions.csv")), "path", "class")
    assert len(predictions) == ROWS and {c for _, c in predictions} <= {"benign", "malignant"}
    copied = json.loads((tmp_path / "on_copy" / "split.json").read_text())
    assert copied["class_names"] == split["class_names"]
    assert len(rows_of(tmp_path / "on_copy" / "metrics.csv", *keys)) == 2
    assert (run / "export" / "onnx" / "model.onnx").is_file()
