"""The run directory's small files: summary.json, metrics.csv, split.json (INTERFACE.md)."""

from __future__ import annotations

import csv
import json
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from app.errors import DataError

METRICS_COLUMNS = ["epoch", "loss", "accuracy", "val_loss", "val_accuracy", "images_per_s",
                   "data_wait_fraction", "peak_memory_mb"]


def write_json(path: Path, content: Any) -> None:
    """Atomically: readers never see half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(content, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def append_metrics(path: Path, row: dict) -> None:
    new = not path.exists()
    with open(path, "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=METRICS_COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow({k: row[k] for k in METRICS_COLUMNS})


def keep_rows(path: Path, keep) -> None:
    """Rewrite a CSV file with only the rows `keep(row)` accepts (a resumed run drops what
    it is about to redo, so no row is duplicated)."""
    if not path.exists():
        return
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, [row for row in reader if keep(row)]
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


class Summary:
    """summary.json, rewritten at start, every epoch and at the end."""

    def __init__(self, run_dir: Path, overrides: list[str], *, resumed_from: str | None = None):
        self.path = Path(run_dir) / "summary.json"
        if resumed_from and self.path.exists():  # the same run goes on: keep its record
            self.content = json.loads(self.path.read_text())
            self.content.setdefault("resumed", []).append({"from": resumed_from, "at": _now(),
                                                           "overrides": list(overrides)})
            self.update(status="running", message=None, versions=versions(), git_commit=git_commit())
            return
        self.content: dict[str, Any] = {
            "status": "running", "epochs_completed": 0, "steps": 0, "loss": None, "val_accuracy": None,
            "images_per_s": None, "data_wait_fraction": None, "peak_memory_mb": None, "queue_bytes": None,
            "overrides": list(overrides), "started_at": _now(), "updated_at": _now(),
            "versions": versions(), "hardware": hardware(), "git_commit": git_commit(),
        }
        self.write()

    def update(self, **values: Any) -> None:
        self.content.update(values, updated_at=_now())
        self.write()

    def write(self) -> None:
        write_json(self.path, self.content)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("tensorflow", "keras", "albumentations", "numpy", "hydra-core"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def hardware(gpus: list[str] | None = None) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "gpus": gpus or [], "platform": platform.platform()}


def git_commit() -> str | None:
    """The project's commit when the app runs from a git checkout."""
    source = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def check_same_data(run_dir: Path, source) -> None:
    """A run's data must be what it was trained on: split.json's fingerprint against the source's."""
    recorded = json.loads((Path(run_dir) / "split.json").read_text())
    if recorded.get("fingerprint") != source.fingerprint:
        raise DataError(f"the data changed since {run_dir} was trained (split.json fingerprint "
                        f"{str(recorded.get('fingerprint'))[:12]}, now {source.fingerprint[:12]}): the samples "
                        "would not be the run's. Restore the data, or start a new run.")
