"""RunContext: what the parts of one training run share (config, run directory, summary, state, callbacks)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.runs.checkpoint import RunState
from app.runs.rundir import Summary
from app.schema import Config


@dataclass(kw_only=True)
class RunContext:
    config: Config  # loaded and validated once (app/config.py); `auto` resolved once the queue is planned
    run_dir: Path
    summary: Summary  # this process's summary.json
    state: RunState  # where the run is: what a checkpoint keeps
    user_callbacks: list  # trainer.callbacks, built before any data is read
