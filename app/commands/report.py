"""`python -m app report <sweep dir | run dirs ...> [--out DIR]`: each run's overrides against images/s, data wait,
peak memory (and `plan`'s prediction), final validation accuracy (and trainer.monitor's) and status (report.csv),
and PNG plots of peak memory, images/s and the monitor against each swept key."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from app.errors import ConfigError, DataError
from app.io import atomic_write, write_picture
from app.overrides import as_dict
from app.runs.rundir import better_is_higher, claim_dir, monitored
from app.runs.sweeps import job_order

FIGURES = ["images_per_s", "data_wait_fraction", "peak_memory_mb", "predicted_peak_mb", "val_accuracy", "status"]


def find_runs(paths: list[Path]) -> list[Path]:
    """Each path that is a run directory, and every run directory below the others (a sweep)."""
    runs = []
    for path in paths:
        if not path.exists():
            raise DataError(f"{path} does not exist: give a run directory or a sweep's folder (under outputs/).")
        if (path / "summary.json").is_file():
            runs.append(path)
        else:
            runs += sorted((p.parent for p in path.rglob("summary.json")), key=job_order)
    if not runs:
        raise DataError(f"no run directory (one with summary.json) in or under {', '.join(map(str, paths))}.")
    return runs


def overrides_of(summary: dict) -> dict[str, str]:
    given = as_dict(summary.get("overrides", []))
    return {k: v for k, v in given.items() if k not in ("resume", "overwrite")}


def table(runs: list[Path]) -> tuple[list[str], list[str], list[dict]]:
    """(swept keys, columns, rows): a key is swept when its value differs between runs."""
    summaries = [_summary(r) for r in runs]
    given = [overrides_of(s) for s in summaries]
    keys = sorted({k for g in given for k in g})
    swept = [k for k in keys if len({g.get(k) for g in given}) > 1] or keys
    tags = ["tags"] if any(s.get("tags") for s in summaries) else []  # a column when any run has them
    judged = sorted({monitored(s)[0] for s in summaries} - set(FIGURES))  # a trainer.monitor of its own: a column
    figures = [*FIGURES[:-1], *judged, FIGURES[-1]]
    rows = []
    for run, summary, values in zip(runs, summaries, given, strict=True):
        row = {"run": str(run), **({"tags": ",".join(summary.get("tags") or [])} if tags else {})}
        row.update({k: values.get(k, "") for k in swept})
        chosen = summary.get("queue_auto") or {}
        for name in ("workers", "max_size"):  # what `auto` chose, beside the word
            if row.get(f"queue.{name}") == "auto" and name in chosen:
                row[f"queue.{name}"] = f"auto ({chosen[name]})"
        row.update({f: summary.get(f) for f in figures})
        row["monitor"], row["higher_is_better"] = monitored(summary)[0], better_is_higher(summary)  # not columns
        row["predicted_peak_mb"] = (summary.get("memory_plan") or {}).get("host_peak_mib")
        row["message"] = summary.get("message") or ""  # why a failed run failed
        rows.append(row)
    messages = ["message"] if any(r["message"] for r in rows) else []
    return swept, ["run", *tags, *swept, *figures, *messages], rows


def _summary(run: Path) -> dict:
    """A run's summary.json; a corrupt one is warned about and listed as unreadable instead of stopping the report."""
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
    """report_<key>.png for each swept key (`figure`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for key in swept:
        fig = figure(key, swept, [r for r in rows if r["images_per_s"] is not None])
        path = out / f"report_{key.replace('/', '_')}.png"
        write_picture(path, fig.savefig, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def figure(key: str, swept: list[str], rows: list[dict]):
    """Peak memory, images/s and trainer.monitor against `key`, a line for each mix of the other keys; best starred."""
    import matplotlib.pyplot as plt

    others = [k for k in swept if k != key]
    judged = rows[0]["monitor"] if rows and len({r["monitor"] for r in rows}) == 1 else "val_accuracy"
    numeric = all(_sortable(r[key])[0] == 0 for r in rows)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in others), []).append(row)
    def x(row):
        return _x(row[key], numeric)

    for label, members in sorted(groups.items()):
        name = ", ".join(f"{k}={v}" for k, v in zip(others, label, strict=True)) or None
        for ax, figure_name in zip(axes, ("peak_memory_mb", "images_per_s", judged), strict=True):
            line = _points(ax, members, figure_name, x, label=name)
            if figure_name == "peak_memory_mb" and any(r.get("predicted_peak_mb") for r in members):
                _points(ax, members, "predicted_peak_mb", x, label="predicted (plan)", color=line.get_color(),
                        linestyle="--")
    scored = [r for r in rows if r.get(judged) is not None]
    pick = max if all(r["higher_is_better"] for r in scored) else min
    best = pick(scored, key=lambda r: r[judged], default=None)
    if best is not None:
        axes[2].plot([_x(best[key], numeric)], [best[judged]], marker="*", markersize=16, color="gold",
                     markeredgecolor="black", linestyle="none", label=f"best: {key}={best[key]}")
    values = [float(r[key]) for r in rows] if numeric else []
    titles = ("peak host memory (MiB: the training process, the workers, the ring)", "images/s (training)",
              "validation accuracy" if judged == "val_accuracy" else judged)
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xlabel(key)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if values and min(values) > 0 and max(values) / min(values) > 20:
            ax.set_xscale("log")
        ax.set_ylim(bottom=0, top=1.0 if ax is axes[2] and judged == "val_accuracy" else None)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _x(value, numeric: bool):
    return float(value) if numeric else str(value)


def _points(ax, members: list[dict], figure_name: str, x, **style):
    """Each run's `figure_name` as a point at `x(run)`, and a line through each value's mean (`style`: the line's)."""
    have = [r for r in members if r.get(figure_name) is not None]
    by_value: dict = {}
    for r in have:
        by_value.setdefault(x(r), []).append(r[figure_name])
    xs = sorted(by_value, key=_sortable)
    (line,) = ax.plot(xs, [sum(by_value[v]) / len(by_value[v]) for v in xs], **{"linestyle": "-", **style})
    ax.plot([x(r) for r in have], [r[figure_name] for r in have], linestyle="none", color=line.get_color(),
            marker="o" if line.get_linestyle() == "-" else "x")
    return line


def _sortable(value: str):
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def refuse_replacing_others(out: Path, named: str) -> None:
    """A ConfigError, before any work, when `out` is in a run, a file, or holds report.csv or report_*.png without a
    report's report.csv (first column `run`); an earlier report's files are replaced. `named`: `out` as messages say."""
    advice = "give --out another folder (a new one, or one an earlier report wrote)"
    run = next((folder for folder in [out, *out.resolve().parents] if (folder / "summary.json").is_file()), None)
    if run is not None:  # a run's folder is its record
        raise ConfigError(f"{named} is {'' if run == out else 'inside '}the run directory {run}, which report never "
                          f"writes into (a run's folder is its record): {advice}.")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{named} is a file, where report writes a folder (report.csv and its PNGs): {advice}.")
    ours = [path.name for path in [out / "report.csv", *sorted(out.glob("report_*.png"))] if path.exists()]
    if ours and not _earlier_report(out / "report.csv"):
        raise ConfigError(f"{named} holds {', '.join(ours)}, which report did not write (a report's report.csv "
                          f"starts with the column `run`) and would replace: {advice}, or move those files away.")


def _earlier_report(path: Path) -> bool:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return next(csv.reader(f), [None])[0] == "run"
    except (OSError, UnicodeDecodeError):
        return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="a sweep directory, or run directories")
    parser.add_argument("--out", type=Path, help="where report.csv and the PNGs go: a new folder or an earlier "
                                                 "report's (default: the one sweep directory given, else ./report)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    runs = find_runs(args.paths)
    one = args.paths[0] if len(args.paths) == 1 else None
    # a sweep's folder gets its report; a run's folder is the run's record, never written by report
    out = args.out or (one if one and one.is_dir() and not (one / "summary.json").exists() else Path("report"))
    if args.out is None and (out / "report.csv").exists() and out == Path("report"):
        out = claim_dir(out)  # ./report holds another report: report-1, report-2, ...
    refuse_replacing_others(out, f"--out {out}" if args.out else f"report's folder {out}")
    out.mkdir(parents=True, exist_ok=True)
    swept, columns, rows = table(runs)
    with atomic_write(out / "report.csv", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print(render([c for c in columns if c != "message"], rows))
    for row in rows:
        if row["message"]:
            print(f"\n{row['run']} ({row['status']}): {row['message']}")
    pictures = plot(swept, rows, out)
    print(f"\nwritten: {out / 'report.csv'}" + "".join(f", {p}" for p in pictures))
