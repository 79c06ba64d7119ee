"""A multilabel run's thresholds.json, read and checked wherever it is used (predict, export)."""
# evaluate writes it: each class's threshold and the checkpoint they were picked for

from __future__ import annotations

import json
import math
from pathlib import Path

from app.errors import DataError
from app.io import read_regular
from app.runs.checkpoint import best_name


def read_thresholds(path: Path, run_dir: Path, given: str | None = None) -> dict:
    """thresholds.json at `path` (`given`: thresholds='s), each threshold in [0, 1]; else a DataError naming it."""
    try:
        saved = json.loads(read_regular(path))
    except (OSError, ValueError) as error:
        saved = error
    if isinstance(saved, dict) and not isinstance(saved.get("thresholds", {}), dict):
        saved = f"its thresholds are {type(saved['thresholds']).__name__}, not an object of class: threshold"
    elif isinstance(saved, dict):
        wrong = next(((name, value) for name, value in saved.get("thresholds", {}).items() if not _a_threshold(value)),
                     None)
        if wrong is None:
            return saved
        saved = f"class {wrong[0]!r}'s threshold is {wrong[1]!r}, not a number from 0 to 1"
    why = saved if isinstance(saved, str | Exception) else f"it holds {type(saved).__name__}, not a JSON object"
    instead = ", or leave thresholds= out for trainer.threshold" if given else ""
    raise DataError(f"{f'thresholds={given}' if given else path} cannot be used ({why}): give a thresholds.json "
                    f"(`python -m app evaluate resume={run_dir}` writes the run's own){instead}. Nothing was written.")


def _a_threshold(value) -> bool:
    # a probability's cut: NaN would name no class, a value above 1 none ever, below 0 every one
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= 1


def checkpoints_apart(saved: dict, path: Path, run_dir: Path) -> tuple[str, str] | None:
    # (the checkpoint `saved` was picked for, the run's best: model.keras's) where they differ, else None
    if "checkpoint" not in saved:
        return None
    picked, best = Path(str(saved["checkpoint"])), best_name(run_dir)
    scored = Path(run_dir) / "checkpoints" / str(best) if best else None
    # the run's own file names its run by where it is (a moved run keeps it); another file by the path it records
    own = Path(path).resolve().parent == Path(run_dir).resolve()
    same_run = own or picked.parent.parent.resolve() == Path(run_dir).resolve()
    if scored is not None and same_run and picked.name == scored.name:
        return None
    return str(picked), str(scored or "(unknown)")
