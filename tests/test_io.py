"""app/io.py: a JSON file written over only where the app wrote the one there."""

from __future__ import annotations

import json

import pytest

from app.errors import DataError
from app.io import write_json_over_own


def test_a_json_file_is_written_over_only_where_its_writer_wrote_the_one_there(tmp_path):
    path = tmp_path / "thresholds.json"
    write_json_over_own(path, {"split": "val", "thresholds": {"a": 0.4}}, "evaluate")
    write_json_over_own(path, {"split": "val", "thresholds": {"a": 0.6}}, "evaluate")  # its own: replaced
    assert json.loads(path.read_text())["thresholds"] == {"a": 0.6}
    for foreign in ('{"mine": 1}', "not json", "[1, 2]"):
        path.write_text(foreign)
        with pytest.raises(DataError, match="is not a file evaluate wrote: move it away"):
            write_json_over_own(path, {"split": "val", "thresholds": {}}, "evaluate")
        assert path.read_text() == foreign  # never overwritten
