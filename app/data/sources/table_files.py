"""A table of samples read as users keep it: CSV or TSV (values stay strings, `000123` too), JSON Lines, Parquet
(pyarrow, the `parquet` extra, no pandas). Every row comes with where it is in its file, so a fault names it."""

from __future__ import annotations

import csv
import itertools
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import DataError
from app.frameworks import install_command

FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
           ".parquet": "parquet", ".pq": "parquet"}
EXCEL_SEP = re.compile(r"sep=(.)")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Row:
    at: str  # where the row is in its file: "line 7" (text tables) or "row 7" (Parquet, counted from 1)
    number: int  # that line or row
    values: dict = field(default_factory=dict)
    fault: str | None = None  # a row the header does not fit, or a JSON line that is no object


def read_rows(path: Path) -> tuple[list[str], list[Row]]:
    """(the table's column names, its rows); a DataError for a table that cannot be read at all."""
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise DataError(f"data.table {path} is not a table this app reads: give a .csv, .tsv, .jsonl (JSON Lines) "
                        "or .parquet file")
    try:
        if kind == "parquet":
            return _parquet(path)
        with open(path, encoding="utf-8-sig", newline="") as f:
            return _jsonl(f, path) if kind == "jsonl" else _delimited(f, "\t" if kind == "tsv" else ",", path)
    except UnicodeDecodeError as error:
        raise DataError(f"data.table {path} is not UTF-8 text (byte {error.start}): save it as UTF-8") from None
    except OSError as error:
        raise DataError(f"data.table {path} cannot be read: {error.strerror or error}") from None


def _delimited(f, delimiter: str, path: Path) -> tuple[list[str], list[Row]]:
    first = f.readline()
    declared = EXCEL_SEP.fullmatch(first.rstrip("\r\n"))  # Excel's own first line: `sep=;`
    skipped = 1 if declared else 0
    if declared:
        first = f.readline()
    if not first:
        raise DataError(f"data.table {path} is empty: its first line names the columns (e.g. path,label)")
    found = declared.group(1) if declared else _delimiter_used(first, delimiter)
    if found != delimiter:
        why = "as its first line (sep=) declares" if declared else f"not by the format's {delimiter!r}"
        log.info("data.table %s: its fields are separated by %r, %s", path, found, why)
    # strict: a stray quote is an error, not a merged row
    reader = csv.reader(itertools.chain([first], f), delimiter=found, strict=True)
    try:
        header = [name.strip() for name in next(reader)]
    except csv.Error as error:
        raise DataError(f"data.table {path}, line {1 + skipped}: {error}") from None
    return header, list(_delimited_rows(reader, header, path, skipped))


def _delimiter_used(header_line: str, delimiter: str) -> str:
    """The format's delimiter, else the one the header plainly uses (Excel's `;` where a comma is the decimal mark)."""
    if delimiter in header_line:
        return delimiter
    try:
        return csv.Sniffer().sniff(header_line, delimiters=";\t|,").delimiter
    except csv.Error:
        return delimiter


def _delimited_rows(reader, header: list[str], path: Path, skipped: int) -> Iterator[Row]:
    while True:
        line = reader.line_num + 1 + skipped  # where the record starts (a quoted field may span lines)
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:  # a stray or unclosed quote: the rows after it cannot be told apart
            raise DataError(f"data.table {path}, line {line}: {error} (a field holding a comma, a quote or a line "
                            'break must be quoted whole, its quotes doubled: "a ""b"", c")') from None
        if not fields or fields == [""]:
            continue  # a blank line
        if len(fields) != len(header):
            yield Row(f"line {line}", line, fault=f"it has {len(fields)} fields, the header {len(header)}")
        else:
            yield Row(f"line {line}", line, dict(zip(header, fields, strict=True)))


def _jsonl(f, path: Path) -> tuple[list[str], list[Row]]:
    rows, columns = [], {}
    for number, text in enumerate(f, start=1):
        if not text.strip():
            continue
        try:
            value = json.loads(text, object_pairs_hook=_object_once)
        except json.JSONDecodeError as error:
            rows.append(Row(f"line {number}", number, fault=f"it is not JSON ({error.msg})"))
            continue
        except _KeyTwice as error:
            rows.append(Row(f"line {number}", number, fault=f"it names key `{error}` more than once: give each "
                                                            "column one value a line"))
            continue
        if not isinstance(value, dict):
            rows.append(Row(f"line {number}", number, fault="it is not a JSON object of column names and values"))
            continue
        columns.update(dict.fromkeys(value))
        rows.append(Row(f"line {number}", number, value))
    if rows and not columns:  # not one line read: its first fault says why, not "no rows"
        raise DataError(f"data.table {path}, {rows[0].at}: {rows[0].fault}; not one line of it is a row (a JSON "
                        'object a line: {"path": "a.jpg", "label": "cat"})')
    return list(columns), rows


class _KeyTwice(ValueError):  # a JSON object naming a key twice: json keeps the last silently
    pass


def _object_once(pairs: list[tuple[str, object]]) -> dict:
    value = dict(pairs)
    if len(value) < len(pairs):
        raise _KeyTwice(next(key for i, (key, _) in enumerate(pairs) if key in dict(pairs[:i])))
    return value


def _parquet(path: Path) -> tuple[list[str], list[Row]]:
    try:
        import pyarrow.parquet as pq  # the `parquet` extra: only a Parquet table needs it
    except ImportError:
        raise DataError(f"data.table {path} is Parquet, which needs the package pyarrow: "
                        f"{install_command('parquet')}") from None
    try:
        table = pq.read_table(path)
    except Exception as error:  # noqa: BLE001 - pyarrow's ArrowInvalid and kin: the file is no Parquet it reads
        raise DataError(f"data.table {path} cannot be read as Parquet: {error}") from None
    return table.column_names, [Row(f"row {n}", n, values) for n, values in enumerate(table.to_pylist(), start=1)]
