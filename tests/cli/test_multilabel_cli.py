"""Several labels an image through the real CLI, from a Planet-style table (`image_name,tags`, the tags
space-separated, some rows with none): 32² images holding 0 to 3 of 4 drawn shapes. Trained two epochs with
one worker, SIGKILLed inside epoch 2 and resumed to the metrics rows of the run uninterrupted; evaluate (the
per-class table, thresholds.json from val), predict (a probability column a class, `labels`), export to ONNX
(export's own parity check through the sigmoid); the table against the same table with its label sets shuffled
across images (the negative control), which learns to a macro val AUC of 0.9 in 6 epochs on the real labels,
stays near chance on the shuffled ones, each judged by val_auc, and `report` of the two; prepared into a copy that
bench and preview read. (A sweep's jobs, each in a process of its own: README's sweep in
tests/cli/test_docs_commands.py; here the two runs share the test's one process.)"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from docs_runner import spawn_one_process_for, train_killed
from PIL import Image, ImageDraw

TESTS = Path(__file__).resolve().parents[1]
SHAPES = ("circle", "cross", "square", "triangle")
COLOURS = {"circle": (230, 40, 40), "cross": (40, 200, 40), "square": (60, 60, 240), "triangle": (230, 220, 40)}
ROWS, SIDE = 200, 32


def draw(canvas: ImageDraw.ImageDraw, shape: str, x: int, y: int, r: int) -> None:
    colour = COLOURS[shape]
    if shape == "circle":
        canvas.ellipse((x - r, y - r, x + r, y + r), fill=colour)
    elif shape == "square":
        canvas.rectangle((x - r, y - r, x + r, y + r), fill=colour)
    elif shape == "triangle":
        canvas.polygon([(x, y - r), (x - r, y + r), (x + r, y + r)], fill=colour)
    else:
        canvas.line((x - r, y, x + r, y), fill=colour, width=3)
        canvas.line((x, y - r, x, y + r), fill=colour, width=3)


def write_tiles(folder: Path) -> tuple[Path, Path]:
    """ROWS JPEGs of 0 to 3 shapes on noise, and two tables of them: their tags, and the tags shuffled."""
    rng = np.random.default_rng(0)
    (folder / "train-jpg").mkdir(parents=True)
    names, tags = [], []
    for i in range(ROWS):
        image = Image.fromarray(rng.integers(60, 140, (SIDE, SIDE, 3), np.uint8))
        shown = sorted(rng.choice(SHAPES, size=rng.choice(4, p=[0.15, 0.35, 0.3, 0.2]), replace=False))
        canvas = ImageDraw.Draw(image)
        for shape in shown:
            draw(canvas, shape, *rng.integers(7, SIDE - 7, 2), r=int(rng.integers(4, 7)))
        image.save(folder / "train-jpg" / f"train_{i}.jpg", quality=95)
        names.append(f"train_{i}")
        tags.append(" ".join(shown))
    tables = []
    for name, column in (("train_v2.csv", tags), ("shuffled.csv", list(rng.permutation(tags)))):
        with open(folder / name, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["image_name", "tags"])
            writer.writerows(zip(names, column, strict=True))
        tables.append(folder / name)
    return tables[0], tables[1]


def rows_of(path: Path, *keys: str) -> list[tuple]:
    return [tuple(row[k] for k in keys) for row in csv.DictReader(path.open())]


def write_columns_table(folder: Path) -> Path:
    """CheXpert's shape, a 0/1 column a class and no label column, with a split column: validation has no positive
    of `c`; test has no class with both a positive and a negative."""
    rng = np.random.default_rng(1)
    folder.mkdir(parents=True)
    rows = []
    for i, split in enumerate(["train"] * 24 + ["val"] * 10 + ["test"] * 4):
        shown = rng.integers(0, 2, 3)
        shown = shown if split == "train" else [1, 0, 0] if split == "test" else [i % 2, i // 2 % 2, 0]
        image = rng.integers(60, 140, (SIDE, SIDE, 3), np.uint8)
        image += (np.asarray(shown) * 100).astype(np.uint8)  # each class a band: scores spread as it learns
        Image.fromarray(image).save(folder / f"{i}.png")
        rows.append([f"{i}.png", *shown, split])
    with open(folder / "labels.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "a", "b", "c", "split"], *rows])
    return folder / "labels.csv"


def columns_config(table: Path) -> list[str]:
    return ["data=table", f"data.table={table}", "data.task=multilabel", "data.columns.labels=[a,b,c]",
            "data.columns.label=null", "data.columns.split=split", "data.image_size=[32,32]", "data.batch_size=4",
            "model.widths=[8]", "augment=none", "optimizer.learning_rate=0.05", "trainer.epochs=1", "queue.workers=1",
            "hydra.run.dir=xrays_run"]


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> SimpleNamespace:
    """The SIGKILLed run, then both tests' commands one after another in one process (tests/docs_runner.py):
    TensorFlow loads once."""
    root = tmp_path_factory.mktemp("multilabel")
    table, shuffled = write_tiles(root / "planet")
    config = ["data=table", f"data.table={table}", "data.columns.path=image_name", "data.columns.label=tags",
              "data.path_format=train-jpg/{}.jpg", "data.task=multilabel", "data.label_separator=' '",
              "data.image_size=[32,32]", "data.batch_size=16", "model.widths=[8,16]", "augment=none",
              "optimizer.learning_rate=0.003", "trainer.deterministic=true", "trainer.checkpoint_every_steps=2",
              "queue.workers=1"]
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    run = train_killed([*config, "trainer.epochs=2"], cwd=root, env=env)
    learning = root / "learning"  # the real labels' run and the shuffled ones', 6 epochs each
    copy = ["data=prepared", "data.path=copy", "data.task=multilabel", "data.image_size=[32,32]", "data.batch_size=16"]
    columns = columns_config(write_columns_table(root / "xrays"))
    done = spawn_one_process_for(
        ["train", *config, "trainer.epochs=2", "hydra.run.dir=whole"], ["train", f"resume={run}"],
        ["evaluate", f"resume={run}"], ["predict", f"resume={run}", f"input={table.parent / 'train-jpg'}"],
        ["export", f"resume={run}", "export.format=onnx"],
        *(["train", *config, f"data.table={labels}", "trainer.epochs=6", f"hydra.run.dir={learning / labels.stem}"]
          for labels in (table, shuffled)),
        ["report", str(learning / table.stem), str(learning / shuffled.stem), "--out", str(root / "report")],
        ["prepare", *config[:8], "prepare.out=copy", "prepare.format=raw"],
        ["bench", *copy, "bench.modes=[loader_steps]", "bench.batches=2",
         "bench.warmup=1", "bench.memory=false", "hydra.run.dir=bench"],
        ["preview", *copy, "hydra.run.dir=preview"],
        ["train", *columns], ["evaluate", "resume=xrays_run"], ["evaluate", "resume=xrays_run", "split=test"],
        cwd=root, env=env)
    return SimpleNamespace(root=root, run=run, table=table, learning=learning, planet=done[:11], columns=done[11:])


@pytest.mark.slow
def test_several_labels_an_image_train_resume_evaluate_predict_export_and_learn_judged_by_val_auc(ran):
    root, run, table = ran.root, ran.run, ran.table
    for result in ran.planet:
        assert result.returncode == 0, (result.args, result.stdout[-3000:])
    # the resumed run is the uninterrupted one, row for row, with the multilabel figures in each row
    keys = ("epoch", "loss", "auc", "map", "f1_circle", "val_loss", "val_auc", "val_map", "val_macro_recall")
    assert rows_of(run / "metrics.csv", *keys) == rows_of(root / "whole" / "metrics.csv", *keys)
    assert len(rows_of(run / "metrics.csv", *keys)) == 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"]["monitor"] == "val_auc" and summary["best"]["mode"] == "max"
    # evaluate: the per-class table, thresholds from the validation split into the run
    scored = json.loads(next((run / "evaluate").glob("*/evaluation.json")).read_text())
    thresholds = json.loads((run / "thresholds.json").read_text())
    assert scored["task"] == "multilabel" and thresholds["split"] == "val"
    assert sorted(thresholds["thresholds"]) == list(SHAPES)
    for name in SHAPES:
        row = scored["per_class"][name]
        assert {"support", "precision", "recall", "f1", "auc", "average_precision", "tp", "fp", "fn", "tn"} <= set(row)
        assert row["tp"] + row["fp"] + row["fn"] + row["tn"] == scored["samples"]
    # predict: a probability column a class and the classes at or above their thresholds
    predicted = list(csv.DictReader(next((run / "predict").glob("*/predictions.csv")).open()))
    assert len(predicted) == ROWS and {*SHAPES, "labels"} <= set(predicted[0])
    for row in predicted:  # a probability printed within its 6 decimals of the threshold could go either way
        clear = [name for name in SHAPES if abs(float(row[name]) - thresholds["thresholds"][name]) > 1e-6]
        named = {name for name in clear if float(row[name]) >= thresholds["thresholds"][name]}
        assert set(filter(None, row["labels"].split("|"))) & set(clear) == named
    # export: the graph keeps the sigmoid, its parity checked at each class's threshold
    exported = json.loads((run / "export" / "onnx" / "export.json").read_text())
    assert exported["parity"]["passed"] and exported["parity"]["label_agreement"] == 1.0
    described = json.loads((run / "export" / "onnx" / "preprocessing.json").read_text())
    assert described["task"] == "multilabel" and described["thresholds"] == pytest.approx(thresholds["thresholds"])
    # the real labels learn (macro val AUC ≥ 0.9 in 6 epochs), shuffled ones do not; judged by val_auc
    jobs = list(ran.learning.iterdir())
    assert len(jobs) == 2 and {json.loads((job / "summary.json").read_text())["best"]["monitor"] for job in jobs} \
        == {"val_auc"}
    learned = {Path(json.loads((job / "split.json").read_text())["table"]).name:
               json.loads((job / "summary.json").read_text())["best"]["value"] for job in jobs}
    assert learned["train_v2.csv"] >= 0.9 and learned["shuffled.csv"] <= 0.65, learned
    reported = list(csv.DictReader((root / "report" / "report.csv").open()))
    best = max(reported, key=lambda row: float(row["val_auc"]))
    assert str(table) in best["data.table"], reported
    # the prepared copy keeps each image's label vector: bench trains on it through the step loop
    bench = json.loads((root / "bench" / "bench.json").read_text())["results"]
    assert isinstance(bench["loader_steps"].get("images_per_s"), float), bench
    assert (root / "preview" / "preview.png").is_file()


@pytest.mark.slow
def test_val_auc_leaves_out_a_class_without_a_validation_positive_as_evaluate_does(ran):
    done, run = ran.columns, ran.root / "xrays_run"
    for result in done:
        assert result.returncode == 0, (result.args, result.stdout[-3000:])
    (val_auc,) = [float(v) for (v,) in rows_of(run / "metrics.csv", "val_auc")]
    evaluated = {}
    for path in (run / "evaluate").glob("*/evaluation.json"):
        evaluated[json.loads(path.read_text())["split"]] = path
    scored = json.loads(evaluated["val"].read_text())
    assert scored["per_class"]["c"]["auc"] is None and scored["per_class"]["a"]["auc"] is not None
    assert val_auc == pytest.approx(scored["auc"], abs=0.02)  # 1,000 bins against the scores themselves
    # negative control: the mean counting `c` as Keras's AUC(multi_label=True) counts it (an area of 0)
    assert abs(val_auc - scored["auc"] * 2 / 3) > 0.1
    # on test no class is defined: every file written, each undefined figure shown as such
    on_test = json.loads(evaluated["test"].read_text())
    assert on_test["auc"] is None and on_test["mean_average_precision"] is not None
    assert "macro AUC -," in done[2].stdout and (evaluated["test"].parent / "report.txt").is_file()
