"""The app's own outputs in data.path, known by what only the app writes there: a folder source's classes never."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from app.data.copies.shards import MANIFEST

HYDRA_OUTPUTS = ("outputs", "multirun")  # Hydra's folders in the working folder (conf/common.yaml, its default)
log = logging.getLogger("app.data.sources.folder")  # said where the classes are scanned

# A file or folder only the app writes, and what it makes the folder holding it: never a class.
MARKERS = ((MANIFEST, "a prepared copy"), (".hydra", "a run's folder"), ("summary.json", "a run's folder"),
            ("metrics.csv", "a run's folder"), ("checkpoints", "a run's folder"),
            ("report.csv", "a report's folder"), ("multirun.yaml", "a sweep's folder"))


def is_app_output(folder: Path) -> bool:
    # a prepared copy, a run's, report's or sweep's folder, or Hydra's outputs/ in the working folder: no class
    what = kind(folder) or ("Hydra's output folder (data.path is the working folder)" if folder.name in
                            HYDRA_OUTPUTS and folder.parent.resolve() == Path.cwd().resolve() else None)
    if what:
        log.info("%s is %s, the app's own output: left out of the classes", folder, what)
    return what is not None


def kind(folder: Path, depth: int = 0) -> str | None:
    # what output `folder` is, by its markers; a folder of only such folders (runs/<run>/) is one too
    found = next((f"{what} (it holds {name})" for name, what in MARKERS if os.path.lexists(folder / name)), None)
    if found or depth >= 2:
        return found
    entries = [e for e in os.scandir(folder) if not e.name.startswith(".")]
    every = entries and all(_is_folder(e) and kind(Path(e.path), depth + 1) for e in entries)  # stops at an image
    return f"a folder of the app's outputs ({entries[0].name}, ...)" if every else None


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # a link in a loop
        return False
