"""app/training/rundir.py: a resumed run's data is the data it was trained on, and a refusal
says which files differ."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from app.data.folder import folder_source
from app.errors import DataError
from app.training.rundata import check_same_data


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
