"""The run's CSV files: appended a row at a time, cut back to a checkpoint on resume, a damaged one named."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from app.errors import DataError
from app.io import atomic_write, open_own


def append_metrics(path: Path, row: dict) -> None:
    """Appends `row` to metrics.csv; the first row's keys are its columns."""
    new = not path.exists()
    columns = list(row) if new else path.read_text(encoding="utf-8").splitlines()[0].split(",")
    with open_own(path, "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        if new:
            writer.writeheader()
        writer.writerow({k: row.get(k) for k in columns})


def rewrite_keeping_rows(path: Path, keep, column: str) -> None:
    """Rewrites a CSV file atomically with only the rows `keep(row)` accepts, with its own line ends."""
    kept = rows_kept(path, keep, column)
    if kept is not None:
        write_rows(path, *kept)


def rows_kept(path: Path, keep, column: str) -> tuple[list[str], list[dict], str] | None:
    """(columns, the rows `keep(row)` accepts, the line end) of a CSV file, None when it is missing."""
    # a damaged one (not UTF-8, no `column` in its header, a row that does not parse or is cut short): a DataError
    path = Path(path)
    if not path.exists():
        return None
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _damaged(path, raw[:error.start].count(b"\n") + 1, "bytes that are not text (UTF-8)") from None
    first = text.split("\n", 1)[0]
    ending = "\r\n" if first.endswith("\r") else "\n"
    reader = csv.reader(io.StringIO(text, newline=""))
    columns, rows = next(reader, []), []
    if column not in columns:
        raise DataError(f"{path} is damaged: it has no header line with the `{column}` column"
                        f"{' (the file is empty)' if not raw else ''}. Nothing was changed. Restore the file from a "
                        "copy of the run, or start a new run.")
    kept_line = 0
    for values in reader:
        if not values:  # a blank line
            continue
        if len(values) != len(columns):
            raise _damaged(path, reader.line_num, f"{len(values)} fields where the header has {len(columns)}")
        row = dict(zip(columns, values, strict=True))
        try:
            if keep(row):
                rows.append(row)
                kept_line = reader.line_num
        except (TypeError, ValueError, KeyError) as error:
            raise _damaged(path, reader.line_num, f"a value that is not what the column holds ({error})") from None
    if kept_line and kept_line == reader.line_num and not text.endswith("\n"):  # a row after it would be dropped
        raise _damaged(path, kept_line, "a row cut short (the file ends inside it: a write that stopped midway)")
    return columns, rows, ending


def check_history(run_dir: Path, kept: dict, epochs_done: int, steps_recorded: int) -> None:
    """A DataError where metrics.csv or samples.csv (`kept`) lacks an epoch or step the checkpoint did."""
    metrics = kept["metrics.csv"]
    found = [int(row["epoch"]) for row in metrics[1]] if metrics else []
    missing = sorted(set(range(1, epochs_done + 1)) - set(found))
    problem = None
    if missing:
        problem = ("metrics.csv", "is missing" if metrics is None else
                   f"has no row for epoch(s) {', '.join(map(str, missing))}", f"{epochs_done} epoch(s)")
    elif steps_recorded and kept["samples.csv"] is None:
        problem = ("samples.csv", "is missing", f"{steps_recorded} step(s), recorded with trainer.record_samples")
    elif steps_recorded and (gone := sorted(set(range(1, steps_recorded + 1))
                                            - {int(row["step"]) for row in kept["samples.csv"][1]})):
        problem = ("samples.csv", f"has no row for step(s) {_spans(gone)}", f"{steps_recorded} step(s)")
    if problem:
        name, what, done = problem
        raise DataError(f"{Path(run_dir) / name} {what}, though the run's checkpoint has done {done}: resuming "
                        "would write a history without them. Nothing was changed. Restore the file from a copy of "
                        "the run, or start a new run.")


def write_rows(path: Path, columns: list[str], rows: list[dict], ending: str = "\n") -> None:
    with atomic_write(path, newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator=ending)
        writer.writeheader()
        writer.writerows(rows)


def _damaged(path: Path, line: int, what: str) -> DataError:
    return DataError(f"{path} is damaged: line {line} holds {what}. Nothing was changed. Restore the file from a "
                     f"copy of the run, or delete that line (and any other damaged one) in an editor, then run "
                     "the command again.")


def _spans(numbers: list[int]) -> str:
    """1, 2, 3, 7 → "1-3, 7"."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
