"""app/io.py: a JSON file written over only where the app wrote the one there; no write through a link."""

from __future__ import annotations

import json
import logging
import os
import threading

import pytest
from PIL import Image

from app.data.pixels.pixels import stats_of
from app.errors import ConfigError, DataError
from app.io import OwnFileHandler, open_own, read_regular, write_json_over_own, write_picture


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


def test_an_append_replaces_a_link_by_a_copy_and_never_writes_its_target(tmp_path):
    theirs = tmp_path / "theirs.log"
    theirs.write_text("a user's line\n")
    log = tmp_path / "train.log"
    log.symlink_to(theirs)
    with open(log, "a") as f:  # negative control: a plain append writes into the link's target
        f.write("through\n")
    assert theirs.read_text() == "a user's line\nthrough\n"
    with open_own(log, "a", encoding="utf-8") as f:
        f.write("the app's line\n")
    assert theirs.read_text() == "a user's line\nthrough\n" and not log.is_symlink()
    assert log.read_text() == "a user's line\nthrough\nthe app's line\n"  # what the link showed, then the app's


def test_a_hard_linked_file_is_replaced_by_a_copy_before_an_append_or_a_write(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("a user's notes\n")
    log = tmp_path / "train.log"
    os.link(notes, log)
    with open(log, "a") as f:  # negative control: a plain append writes into the other name's file
        f.write("through\n")
    assert notes.read_text() == "a user's notes\nthrough\n"
    with open_own(log, "a", encoding="utf-8") as f:
        f.write("the app's line\n")
    assert notes.read_text() == "a user's notes\nthrough\n" and os.stat(notes).st_nlink == 1
    assert log.read_text() == "a user's notes\nthrough\nthe app's line\n"
    os.link(notes, tmp_path / "metrics.csv")
    with open_own(tmp_path / "metrics.csv", "w", encoding="utf-8") as f:
        f.write("epoch\n")
    assert notes.read_text() == "a user's notes\nthrough\n" and (tmp_path / "metrics.csv").read_text() == "epoch\n"


def test_a_log_handler_a_dangling_link_and_a_whole_file_never_write_through_links(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "run.log").symlink_to(elsewhere)  # a link to nothing: open(…, "a") would create `elsewhere`
    handler = OwnFileHandler(tmp_path / "run.log", encoding="utf-8")
    handler.emit(logging.LogRecord("app", logging.INFO, __file__, 1, "a line", None, None))
    handler.close()
    assert not elsewhere.exists() and (tmp_path / "run.log").read_text() == "a line\n"
    picture = tmp_path / "augmented.png"
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8 a JPEG")
    picture.symlink_to(tmp_path / "photo.jpg")
    write_picture(picture, Image.new("RGB", (4, 4)).save)
    assert (tmp_path / "photo.jpg").read_bytes() == b"\xff\xd8 a JPEG" and Image.open(picture).format == "PNG"
    (tmp_path / "folder").mkdir()
    (tmp_path / "scalars.csv").symlink_to(tmp_path / "folder")
    with pytest.raises(DataError, match="scalars.csv is a symbolic link to the folder"):
        open_own(tmp_path / "scalars.csv", "a")


def test_a_file_a_config_names_is_refused_unread_when_not_regular_never_waiting_on_a_pipe(tmp_path):
    pipe = tmp_path / "stats.json"
    os.mkfifo(pipe)
    said = []

    def read_stats() -> None:
        try:
            stats_of(str(pipe))
        except ConfigError as error:
            said.append(str(error))

    reader = threading.Thread(target=read_stats, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # it waits for a writer: be one, so the test ends
        open(pipe, "w").close()
    assert not reader.is_alive() and said, "data.normalize.stats=<a pipe> waited for a writer"
    assert "data.normalize.stats" in said[0] and "not a regular file" in said[0] and str(pipe) in said[0]
    with pytest.raises(OSError, match="not a regular file"):
        read_regular("/dev/urandom")  # a device, never read: it would never end
    with pytest.raises(IsADirectoryError):
        read_regular(tmp_path)
    (tmp_path / "made.json").write_text('{"bands": [{"mean": 1, "std": 2}]}')  # negative control: a file is read
    assert stats_of(str(tmp_path / "made.json")) == ([1.0], [2.0])
