"""app/runs/tables.py: the run's CSV files cut back on resume, their line ends kept, a
damaged one named with its line."""

from __future__ import annotations

import re

import pytest

from app.errors import DataError
from app.runs.tables import append_metrics, rewrite_keeping_rows


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_cutting_back_keeps_the_files_own_line_ends(tmp_path, ending):
    path = tmp_path / "samples.csv"
    path.write_bytes(ending.join(["step,epoch", "1,1", "2,1", "3,2", ""]).encode())
    rewrite_keeping_rows(path, lambda row: int(row["step"]) <= 2, "step")
    assert path.read_bytes() == ending.join(["step,epoch", "1,1", "2,1", ""]).encode()


def test_a_damaged_file_is_named_with_its_line_and_left_as_it_is(tmp_path):
    path = tmp_path / "metrics.csv"
    append_metrics(path, {"epoch": 1, "loss": 0.5})
    append_metrics(path, {"epoch": 2, "loss": 0.4})
    rewrite_keeping_rows(path, lambda row: int(row["epoch"]) <= 2, "epoch")  # negative control: a whole file is read
    for garbage, what in ((b"\xff\xfe\x00junk\n", "not text"), (b"3,0.3,extra\n", "3 fields where the header has 2"),
                          (b"three,0.3\n", "not what the column holds")):
        damaged = path.read_bytes() + garbage
        path.with_name("damaged.csv").write_bytes(damaged)
        with pytest.raises(DataError, match="damaged.csv is damaged: line 4 holds") as raised:
            rewrite_keeping_rows(path.with_name("damaged.csv"), lambda row: int(row["epoch"]) <= 2, "epoch")
        assert what in str(raised.value) and "delete that line" in str(raised.value)
        assert path.with_name("damaged.csv").read_bytes() == damaged


def test_an_empty_or_headless_file_or_a_lost_epoch_is_refused_before_anything_is_written(tmp_path):
    from app.runs.tables import check_history, rows_kept

    path = tmp_path / "metrics.csv"
    for content, what in ((b"", "no header line with the `epoch` column (the file is empty)"),
                          (b"epo", "no header line with the `epoch` column. Nothing")):  # cut inside the header
        path.write_bytes(content)
        with pytest.raises(DataError, match=re.escape(f"metrics.csv is damaged: it has {what}")):
            rows_kept(path, lambda row: True, "epoch")
        assert path.read_bytes() == content
    path.unlink()
    for epoch in (1, 2, 3):
        append_metrics(path, {"epoch": epoch, "loss": 0.5})
    samples = rows_kept(path, lambda row: True, "epoch")  # any whole file will do for samples.csv here

    def history(metrics, epochs, steps=0, recorded=samples):
        check_history(tmp_path, {"metrics.csv": metrics, "samples.csv": recorded}, epochs, steps)

    history(rows_kept(path, lambda row: int(row["epoch"]) <= 2, "epoch"), 2)  # negative control: both there
    with pytest.raises(DataError, match="has no row for epoch\\(s\\) 2, though the run's checkpoint has done 2"):
        history(rows_kept(path, lambda row: int(row["epoch"]) != 2, "epoch"), 2)
    with pytest.raises(DataError, match="metrics.csv is missing, though the run's checkpoint has done 2 epoch"):
        history(rows_kept(tmp_path / "gone.csv", lambda row: True, "epoch"), 2)
    history(None, 0, 0, None)  # inside the first epoch there is no history yet
    with pytest.raises(DataError, match="samples.csv is missing, though the run's checkpoint has done 5 step"):
        history(None, 0, 5, None)


def test_a_resume_reads_every_csv_file_before_it_cuts_any_back(tmp_path):
    """A damaged scalars.csv (logger=csv) is found before metrics.csv and samples.csv are cut."""
    from app.training.session import _drop_records_after

    for epoch in (1, 2):
        append_metrics(tmp_path / "metrics.csv", {"epoch": epoch, "loss": 0.5})
    (tmp_path / "samples.csv").write_text("step,epoch\n1,1\n2,1\n3,2\n4,2\n")
    (tmp_path / "scalars.csv").write_text("split,tag,step,value\ntrain,loss,1,0.5\ntrain,loss,x,0.4\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(DataError, match="scalars.csv is damaged: line 3"):
        _drop_records_after(tmp_path, 1, 2, samples=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing cut back
    (tmp_path / "scalars.csv").write_text("split,tag,step,value\ntrain,loss,1,0.5\ntrain,loss,4,0.4\n")
    _drop_records_after(tmp_path, 1, 2, samples=True)  # negative control: whole files are cut back to the checkpoint
    assert (tmp_path / "samples.csv").read_text() == "step,epoch\n1,1\n2,1\n"
    assert (tmp_path / "scalars.csv").read_text().splitlines()[-1] == "train,loss,1,0.5"


def test_a_row_cut_short_or_a_lost_step_is_named_and_nothing_is_written(tmp_path):
    """A write that stopped midway (a kill, a full disk) leaves a last row without its line end."""
    from app.runs.tables import check_history, rows_kept

    path = tmp_path / "samples.csv"
    whole = "step,epoch,batch,indices\n1,1,0,4 7 1 0\n2,1,1,3 5 2 6\n"
    path.write_text(whole + "3,1,2,8 1")  # the same number of fields: only the missing line end tells
    by_step = lambda step: (lambda row: int(row["step"]) <= step)  # noqa: E731
    assert len(rows_kept(path, by_step(2), "step")[1]) == 2  # negative control: a cut row after the checkpoint goes
    with pytest.raises(DataError, match="samples.csv is damaged: line 4 holds a row cut short"):
        rows_kept(path, by_step(3), "step")
    assert path.read_text() == whole + "3,1,2,8 1"
    path.write_text("step,epoch,batch,indices\n1,1,0,4 7 1 0\n3,1,2,8 1 5 2\n")  # step 2's row deleted
    with pytest.raises(DataError, match=r"samples.csv has no row for step\(s\) 2, though the run's checkpoint has"):
        check_history(tmp_path, {"metrics.csv": None, "samples.csv": rows_kept(path, by_step(3), "step")}, 0, 3)
    path.write_text(whole)
    check_history(tmp_path, {"metrics.csv": None, "samples.csv": rows_kept(path, by_step(2), "step")}, 0, 2)
