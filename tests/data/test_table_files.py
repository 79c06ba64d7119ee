"""Reading a table as users keep it (app/data/sources/table_files.py): each row with the line it starts on,
a spreadsheet's BOM and CRLF read as plain text, a JSON line that is no object a fault of its row."""

from __future__ import annotations

import pytest

from app.data.sources.table_files import read_rows
from app.errors import DataError


def test_a_spreadsheets_csv_with_a_bom_crlf_and_a_quoted_line_break(tmp_path):
    table = tmp_path / "t.csv"
    table.write_bytes("\ufeffpath , label\r\na.jpg,cat\r\n\"b, c.jpg\",\"two\r\nlines\"\r\nd.jpg,dog\r\n".encode())
    header, rows = read_rows(table)
    assert header == ["path", "label"]  # no BOM, no spaces
    assert [(r.number, r.values["path"]) for r in rows] == [(2, "a.jpg"), (3, "b, c.jpg"), (5, "d.jpg")]
    assert rows[1].values["label"] == "two\r\nlines"


def test_rows_that_do_not_fit_are_faults_of_their_line_and_a_stray_quote_stops_the_read(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"path": "a.jpg", "label": 1}\n[1, 2]\nnot json\n')
    header, rows = read_rows(tmp_path / "t.jsonl")
    assert header == ["path", "label"] and rows[0].fault is None and rows[0].values["label"] == 1
    assert "not a JSON object" in rows[1].fault and "not JSON" in rows[2].fault and rows[2].number == 3
    (tmp_path / "t.tsv").write_text("path\tlabel\na.jpg\tcat\textra\n")
    assert read_rows(tmp_path / "t.tsv")[1][0].fault == "it has 3 fields, the header 2"
    (tmp_path / "q.csv").write_text('path,label\na.jpg,"cat\nb.jpg,dog\n')
    with pytest.raises(DataError, match="q.csv, line 2: "):
        read_rows(tmp_path / "q.csv")


def test_a_json_line_naming_a_key_twice_is_a_fault_of_its_line_as_a_csv_header_is(tmp_path):
    table = tmp_path / "t.jsonl"
    table.write_text('{"path": "a.jpg", "label": "cat"}\n{"path": "b.jpg", "label": "cat", "label": "dog"}\n')
    header, rows = read_rows(table)
    assert header == ["path", "label"] and rows[0].fault is None and rows[0].values["label"] == "cat"
    assert rows[1].number == 2 and rows[1].fault.startswith("it names key `label` more than once")
    table.write_text('{"path": "b.jpg", "label": "cat", "group": {"label": "dog"}}\n')  # negative control: nested
    assert read_rows(table)[1][0].fault is None
