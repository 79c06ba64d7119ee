"""app/runs/rundir.py: a resumed run's data is the data it was trained on, and a refusal
says which files differ."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from app.data.sources.folder import folder_source
from app.errors import DataError
from app.runs.rundata import check_same_data


def _tree(root, names):
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (6, 4)).save(root / name)
    return root


def _trained(tmp_path, root):
    """A run folder whose split.json records `root` as it is now, written an hour ago."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "split.json").write_text("{}")
    hour_ago = (run / "split.json").stat().st_mtime - 3600
    for path in root.rglob("*.png"):
        os.utime(path, (hour_ago - 60, hour_ago - 60))
    (run / "split.json").write_text(json.dumps(folder_source(root, 0.5).split))
    os.utime(run / "split.json", (hour_ago, hour_ago))
    return run


def test_a_refused_resume_names_the_files_that_changed(tmp_path):
    root = _tree(tmp_path / "d", [f"{c}/{c}{i}.png" for c in "ab" for i in range(3)])
    run = _trained(tmp_path, root)
    check_same_data(run, folder_source(root, 0.5))  # negative control: the same data passes
    (root / "a" / "a0.png").unlink()
    _tree(root, ["b/new.png"])
    with pytest.raises(DataError) as refused:
        check_same_data(run, folder_source(root, 0.5))
    assert "1 new (b/new.png); 1 gone (a/a0.png)" in str(refused.value)
    assert "modified" not in str(refused.value)


def test_a_rewritten_file_is_named_as_modified(tmp_path):
    root = _tree(tmp_path / "d", [f"{c}/{c}{i}.png" for c in "ab" for i in range(3)])
    run = _trained(tmp_path, root)
    Image.new("RGB", (6, 5)).save(root / "b" / "b1.png")  # same name, new size and time
    with pytest.raises(DataError) as refused:
        check_same_data(run, folder_source(root, 0.5))
    assert "1 modified after the run started (b/b1.png)" in str(refused.value)
    assert "new (" not in str(refused.value) and "gone" not in str(refused.value)


def test_claiming_a_taken_name_gets_the_next_free_one(tmp_path):
    from app.runs.rundir import claim_dir

    first = claim_dir(tmp_path / "day" / "12-00-00")
    assert first == tmp_path / "day" / "12-00-00" and first.is_dir()
    assert claim_dir(first) == first.with_name("12-00-00-1")  # the same second: a directory of its own
    assert claim_dir(first) == first.with_name("12-00-00-2")


def test_a_stopped_runs_leftovers_go_and_a_run_is_never_touched(tmp_path):
    from app.runs.rundir import delete_partial_records, holds_run, move_aside, run_files

    (tmp_path / "samples.csv").write_text("step\n1\n")
    (tmp_path / "tensorboard").mkdir()
    assert not holds_run(tmp_path)  # leftovers of a run stopped before its first checkpoint
    delete_partial_records(tmp_path)
    assert not (tmp_path / "samples.csv").exists() and not (tmp_path / "tensorboard").exists()
    (tmp_path / "samples.csv").write_text("step\n1\n")
    (tmp_path / "metrics.csv").write_text("epoch\n1\n")
    (tmp_path / "checkpoints" / "step-00000004").mkdir(parents=True)
    assert holds_run(tmp_path) and run_files(tmp_path) == ["checkpoints", "metrics.csv"]
    delete_partial_records(tmp_path)  # negative control: a folder that holds a run keeps everything
    assert (tmp_path / "samples.csv").exists()
    assert holds_run(tmp_path.parent)  # a sweep's folder: one of its jobs holds a run
    assert move_aside(tmp_path) == tmp_path.with_name(f"{tmp_path.name}.old") and not tmp_path.exists()


def test_a_resumed_runs_summary_is_kept_until_it_trains(tmp_path):
    from app.runs.rundir import Summary

    Summary(tmp_path, ["trainer.epochs=2"]).update(status="completed", epochs_completed=2)
    resumed = Summary(tmp_path, ["trainer.epochs=3"], resumed_from=str(tmp_path))
    resumed.update(queue_bytes=1)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["status"] == "completed" and "resumed" not in on_disk  # a refused resume changes nothing
    resumed.start()
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["status"] == "running" and on_disk["resumed"][0]["overrides"] == ["trainer.epochs=3"]
    assert on_disk["epochs_completed"] == 2 and on_disk["queue_bytes"] == 1
