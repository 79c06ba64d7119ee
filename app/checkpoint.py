"""Checkpoints: each a directory written under a temporary name and renamed when complete,
so a kill during a write leaves the previous one intact. The newest `keep` are kept, and the
best by validation accuracy."""

from __future__ import annotations

import shutil
from pathlib import Path

from app.rundir import write_json

PREFIX = "step-"


def save(model, run_dir: Path, step: int, state: dict, *, keep: int = 2, protect: str | None = None) -> Path:
    """Model (with optimizer state) and `state` (epoch, step, metrics so far) at `step`."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(exist_ok=True)
    final = root / f"{PREFIX}{step:08d}"
    if final.exists():  # already saved at this step (epoch end on a checkpoint_every_steps boundary)
        return final
    tmp = root / f".{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    model.save(tmp / "model.keras")
    write_json(tmp / "state.json", state)
    tmp.rename(final)
    for old in sorted(root.glob(f"{PREFIX}*"))[:-keep]:
        if old.name != protect:
            shutil.rmtree(old, ignore_errors=True)
    return final
