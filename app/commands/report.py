"""`python -m app report <sweep dir | run dirs ...> [--out DIR]`: a table of each run's overrides
against images/s, data-wait fraction, peak memory, final validation accuracy and status
(printed, and report.csv), and PNG plots of peak memory and images/s against each swept key:
the measured version of seed article 1's table. A command: imported by app/__main__.py only;
never imports TensorFlow (it reads JSON files)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from app.errors import DataError

FIGURES = ["images_per_s", "data_wait_fraction", "peak_memory_mb", "val_accuracy", "status"]


def find_runs(paths: list[Path]) -> list[Path]:
    """Each path that is a run directory, and every run directory below the others (a sweep)."""
    runs = []
    for path in paths:
        if (path / "summary.json").is_file():
            runs.append(path)
        else:
            runs += sorted((p.parent for p in path.rglob("summary.json")), key=_natural)
    if not runs:
        raise DataError(f"no run directory (one with summary.json) in or under {', '.join(map(str, paths))}.")
    return runs


def _natural(path: Path) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in path.parts)


def overrides_of(summary: dict) -> dict[str, str]:
    pairs = (o.lstrip("+~").split("=", 1) for o in summary.get("overrides", []))
    return {k: v for k, v in (p for p in pairs if len(p) == 2) if k != "resume"}


def table(runs: list[Path]) -> tuple[list[str], list[str], list[dict]]:
    """(swept keys, columns, rows): a key is swept when its value differs between runs."""
    summaries = [_summary(r) for r in runs]
    given = [overrides_of(s) for s in summaries]
    keys = sorted({k for g in given for k in g})
    swept = [k for k in keys if len({g.get(k) for g in given}) > 1] or keys
    tags = ["tags"] if any(s.get("tags") for s in summaries) else []  # a column when any run has them
    rows = []
    for run, summary, values in zip(runs, summaries, given, strict=True):
        row = {"run": str(run), **({"tags": ",".join(summary.get("tags") or [])} if tags else {})}
        row.update({k: values.get(k, "") for k in swept})
        row.update({f: summary.get(f) for f in FIGURES})
        rows.append(row)
    return swept, ["run", *tags, *swept, *FIGURES], rows


def _summary(run: Path) -> dict:
    """A run's summary.json; one that is corrupt (a crash mid-write on a full disk, an edit) is
    listed as unreadable, with why, instead of stopping the whole report."""
    try:
        return json.loads((run / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"warning: {run / 'summary.json'} cannot be read ({error}); listed as unreadable. Delete or "
              "restore that file.", file=sys.stderr)
        return {"status": "unreadable"}


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return "" if value is None else str(value)


def render(columns: list[str], rows: list[dict]) -> str:
    cells = [columns] + [[_cell(r[c]) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in cells)


def plot(swept: list[str], rows: list[dict], out: Path) -> list[Path]:
    """For each swept key: peak memory and images/s against its values, one line per
    combination of the other swept keys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    done = [r for r in rows if r["images_per_s"] is not None]
    for key in swept:
        others = [k for k in swept if k != key]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        groups: dict[tuple, list[dict]] = {}
        for row in done:
            groups.setdefault(tuple(row[k] for k in others), []).append(row)
        for label, members in sorted(groups.items()):
            members.sort(key=lambda r: _sortable(r[key]))
            xs = [str(r[key]) for r in members]
            name = ", ".join(f"{k}={v}" for k, v in zip(others, label, strict=True)) or None
            axes[0].plot(xs, [r["peak_memory_mb"] for r in members], marker="o", label=name)
            axes[1].plot(xs, [r["images_per_s"] for r in members], marker="o", label=name)
        for ax, title in zip(axes, ("peak memory (MiB, PSS of the process tree)", "images/s (training)"),
                             strict=True):
            ax.set_xlabel(key)
            ax.set_title(title)
            ax.grid(alpha=0.3)
            if others:
                ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"report_{key.replace('/', '_')}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def _sortable(value: str):
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="a sweep directory, or run directories")
    parser.add_argument("--out", type=Path, help="where report.csv and the PNGs go (default: the one directory "
                                                 "given, else ./report)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    runs = find_runs(args.paths)
    out = args.out or (args.paths[0] if len(args.paths) == 1 and args.paths[0].is_dir() else Path("report"))
    out.mkdir(parents=True, exist_ok=True)
    swept, columns, rows = table(runs)
    with open(out / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    print(render(columns, rows))
    pictures = plot(swept, rows, out)
    print(f"\nwritten: {out / 'report.csv'}" + "".join(f", {p}" for p in pictures))
