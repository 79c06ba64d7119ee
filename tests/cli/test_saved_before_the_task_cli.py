"""Artefacts saved by the app before the task object, used by today's CLI. tests/saved/multilabel_run_before_the_task:
a finished multilabel run (run/, evaluated once: thresholds.json) and its data (data/: labels.csv, path,tags, and
24 PNGs), made in a folder holding data/ by `python -m app train data=table data.table=data/labels.csv
data.columns.label=tags data.task=multilabel "data.label_separator=' '" data.image_size=[16,16] data.batch_size=8
model.widths=[4] augment=none trainer.epochs=1 queue.workers=0 hydra.run.dir=run`, then `evaluate resume=run`.
A resume cannot change data.table, so the table is relative, found from the folder the commands run in.
tests/saved/patch_copy_before_the_split: a patch copy of six 256² slides (tests/slides.py), 30 patches, made by
`python -m app prepare data=folder data.path=slides data.patches.size=[32,32] data.patches.stride=[48,48]
data.image_size=[32,32] augment=none prepare.out=copy`. The module's commands share a process (tests/docs_runner.py's
OneProcess): TensorFlow loads once."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from docs_runner import OneProcess

SAVED = Path(__file__).resolve().parents[1] / "saved"
CLASSES = {"blue", "green", "red"}


def rows(table: Path) -> list[dict]:
    return list(csv.DictReader(table.open()))


@pytest.fixture(scope="module")
def app():
    with OneProcess() as one_process:
        yield one_process


def passed(app, *argvs: list[str], cwd: Path) -> None:
    for argv in argvs:
        result = app(*argv, cwd=cwd)
        assert result.returncode == 0, f"{result.args}: {result.stdout[-3000:]}"


@pytest.mark.slow
def test_a_multilabel_run_saved_before_the_task_object_resumes_evaluates_predicts_and_exports(tmp_path, app):
    saved = SAVED / "multilabel_run_before_the_task"
    shutil.copytree(saved, tmp_path, dirs_exist_ok=True)
    run, few = tmp_path / "run", tmp_path / "few"
    config = json.loads(next((run / "checkpoints").glob("step-*/state.json")).read_text())["config"]
    # as it was saved: the names of that day's modules, the table relative to where the commands run
    assert config["data"]["_target_"] == "app.data.table.table_source" and config["data"]["task"] == "multilabel"
    assert config["logger"]["tensorboard"]["_target_"] == "app.tracking.dashboards.TensorBoardWriter"
    assert config["data"]["table"] == "data/labels.csv"
    assert Path(json.loads((run / "thresholds.json").read_text())["checkpoint"]).parent != run / "checkpoints"
    few.mkdir()
    for image in sorted((tmp_path / "data" / "images").glob("*.png"))[:4]:
        shutil.copy(image, few)
    evaluated_before = set((run / "evaluate").glob("*/evaluation.json"))
    passed(app, ["train", "resume=run", "trainer.epochs=2"], ["evaluate", "resume=run"],
           ["predict", "resume=run", "input=few"],
           ["export", "resume=run", "export.format=onnx", "export.samples=2"], cwd=tmp_path)
    # resumed: epoch 1 is the saved row, epoch 2 trained on from it
    metrics = rows(run / "metrics.csv")
    assert [row["epoch"] for row in metrics] == ["1", "2"] and metrics[0] == rows(saved / "run" / "metrics.csv")[0]
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    (evaluated,) = set((run / "evaluate").glob("*/evaluation.json")) - evaluated_before
    assert json.loads(evaluated.read_text())["task"] == "multilabel"
    # the thresholds evaluate wrote now are the copy's (the saved ones name the folder the run was made in)
    thresholds = json.loads((run / "thresholds.json").read_text())
    assert Path(thresholds["checkpoint"]).parent == run / "checkpoints" and set(thresholds["thresholds"]) == CLASSES
    predicted = rows(next((run / "predict").glob("*/predictions.csv")))
    assert len(predicted) == 4 and {*CLASSES, "labels"} <= set(predicted[0])
    assert json.loads((run / "export" / "onnx" / "export.json").read_text())["parity"]["passed"]


@pytest.mark.slow
def test_a_patch_copy_saved_before_the_split_trains_evaluates_predicts_and_exports(tmp_path, app):
    copy = tmp_path / "copy"
    shutil.copytree(SAVED / "patch_copy_before_the_split", copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["patches"]["settings"]["size"] == [32, 32]  # as it was saved: a copy of patches
    val_patches = manifest["splits"]["val"]["count"]
    config = ["data=prepared", "data.path=copy", "data.image_size=[32,32]", "data.batch_size=8", "model.widths=[4]",
              "augment=none", "trainer.epochs=1", "queue.workers=0", "hydra.run.dir=run"]
    passed(app, ["train", *config], ["evaluate", "resume=run"], ["predict", "resume=run", "input=copy"],
           ["export", "resume=run", "export.format=onnx", "export.samples=2"], cwd=tmp_path)
    run = tmp_path / "run"
    split = json.loads((run / "split.json").read_text())
    assert split["patches"]["val"]["patches"] == val_patches and split["patches"]["val"]["images"] == 2
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    evaluated = json.loads(next((run / "evaluate").glob("*/evaluation.json")).read_text())
    assert evaluated["samples"] == val_patches and evaluated["image_level"]["images"] == 2
    assert rows(next((run / "predict").glob("*/predictions.csv")))
    assert json.loads((run / "export" / "onnx" / "export.json").read_text())["parity"]["passed"]
