"""A run saved by an older version of the app (tests/saved/run_before_the_split: its config names
the loggers' `_target_`s where they were then, under app.training, and its data's under app.data) resumes,
evaluates, predicts and exports through today's CLI."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from docs_runner import spawn_one_process_for
from PIL import Image

SAVED = Path(__file__).resolve().parents[1] / "saved" / "run_before_the_split"


def steps(table: Path) -> list[int]:
    return [int(row["step"]) for row in csv.DictReader(table.open())]


@pytest.mark.slow
def test_a_run_saved_before_the_modules_moved_resumes_evaluates_predicts_and_exports(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SAVED, run)
    (tmp_path / "photos").mkdir()
    for shade in (40, 200):
        Image.new("RGB", (20, 20), (shade, shade // 2, 90)).save(tmp_path / "photos" / f"{shade}.png")
    state = json.loads(next((run / "checkpoints").glob("step-*/state.json")).read_text())
    assert state["config"]["logger"]["csv"]["_target_"] == "app.training.dashboards.CsvWriter"  # as it was saved
    assert state["config"]["data"]["_target_"] == "app.data.synthetic.synthetic_source"
    resumed, evaluated, predicted, exported = spawn_one_process_for(
        ["train", "resume=run", "trainer.epochs=2"], ["evaluate", "resume=run"],
        ["predict", "resume=run", "input=photos"],
        ["export", "resume=run", "export.format=onnx", "export.samples=2"], cwd=tmp_path)
    for done in (resumed, evaluated, predicted, exported):
        assert done.returncode == 0, f"{done.args}: {done.stdout[-3000:]}"
    assert [row.split(",")[0] for row in (run / "metrics.csv").read_text().splitlines()[1:]] == ["1", "2"]
    # the csv logger, built from its saved `_target_`, went on writing in the resumed run
    assert max(steps(run / "scalars.csv")) > max(steps(SAVED / "scalars.csv"))
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert list((run / "evaluate").glob("*/evaluation.json"))
    (rows,) = [list(csv.DictReader(path.open())) for path in (run / "predict").glob("*/predictions.csv")]
    assert sorted(row["path"].rsplit("/", 1)[-1] for row in rows) == ["200.png", "40.png"] and rows[0]["class"]
    assert json.loads((run / "export" / "onnx" / "export.json").read_text())["parity"]["passed"]
