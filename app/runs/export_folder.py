"""Where `export` writes: a new or empty folder or an earlier export; a user's files moved aside, never deleted."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from hydra.core.hydra_config import HydraConfig

from app.errors import config_error
from app.runs.rundir import check_unlocked, holds_run, move_aside, run_files
from app.schema import EXPORT_WRITTEN

log = logging.getLogger("app.export")
# what an export writes into export.out: a folder of these names and export.json is an earlier export
RECORD = "export.json"
EXPORT_FILES = {RECORD, "labels.txt", "preprocessing.json", *EXPORT_WRITTEN.values()}


def check_out(out: Path, run_dir: Path, fmt: str, overwrite: bool) -> None:
    """A ConfigError, before any work, unless `out` is new, empty or an earlier export, or (overwrite=true) anything
    `protected` allows; RunInUseError for a run there that is training."""
    if nothing_at(out) or earlier_export(out):
        return
    default, kept = run_dir / "export" / fmt, protected(out, run_dir)
    if kept or not overwrite:
        ways = ["give another export.out", *([f"leave it out to write {default}"] if out != default else []),
                f"add overwrite=true to move it to {out.name}.old (nothing is deleted) and export there"]
        ways = ways[:-1] if kept else ways  # overwrite=true never moves the run or the log
        advice = f"{', '.join(ways[:-1])} or {ways[-1]}"
        raise config_error("export.out", str(out), f"a new or empty folder, or an earlier export ({RECORD} and the "
                           f"files beside it): {out} {kept or what_is_at(out)}, which the export would replace. "
                           f"{advice[0].upper()}{advice[1:]}")
    if holds_run(out):
        check_unlocked(out)  # a run still training is never moved


def protected(out: Path, run_dir: Path) -> str | None:
    """Why `out` may not be moved, or None: it is or holds the run or log folder, or is in the run but not export/."""
    log_dir = Path(HydraConfig.get().runtime.output_dir)
    for path, what in ((run_dir, "the run being exported"), (log_dir, "this command's log folder")):
        if out == path:
            return f"is {what}"
        if out in path.parents:
            return f"holds {what} ({path})"
    exports = run_dir / "export"
    if run_dir in out.parents and out != exports and exports not in out.parents:
        return f"is inside the run being exported ({run_dir})"
    return None


def nothing_at(out: Path) -> bool:
    return not os.path.lexists(out) or out.is_dir() and not any(out.iterdir())


def earlier_export(out: Path) -> bool:
    """Whether `out` holds export.json and only the files an export writes (a user's file is not ours to delete)."""
    return out.is_dir() and (out / RECORD).is_file() and not foreign_files(out)


def foreign_files(out: Path) -> list[str]:
    return sorted(path.name for path in out.iterdir() if path.name not in EXPORT_FILES)


def what_is_at(out: Path) -> str:
    if not out.is_dir():
        return "is a file"
    if holds_run(out):
        files = run_files(out)
        return f"holds a training run (its {', '.join(files)})" if files else "holds a sweep's training runs"
    names = foreign_files(out)
    listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"holds an earlier export and other files ({listed})" if (out / RECORD).is_file() else \
        f"is a folder holding other files ({listed})"


def publish_moving_aside(staging: Path, out: Path) -> None:
    """Renames the export to `out`; the old goes to <name>.old (back on failure), deleted if an earlier export."""
    if nothing_at(out):
        os.replace(staging, out)  # over an empty folder too
        return
    earlier = earlier_export(out)
    aside = move_aside(out)
    try:
        os.replace(staging, out)
    except BaseException:
        aside.rename(out)
        raise
    if earlier:
        delete_earlier_export(aside)
    else:
        log.warning("overwrite=true: what was in %s moved to %s (nothing was deleted)", out, aside)


def delete_earlier_export(path: Path) -> None:
    """An earlier export, replaced already, deleted; anything else is left where it is."""
    if not earlier_export(path):
        return
    try:
        shutil.rmtree(path)
    except OSError as error:  # the new export is in place: what is left is only the old one's bytes
        log.warning("the earlier export moved to %s could not be deleted (%s): delete it yourself", path, error)
