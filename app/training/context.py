"""What the parts of one training run share, as one object: the run's config, its directory,
summary.json, where it is (RunState) and the user's callbacks. Built once by keyword
(app/training/trainer.py) and handed to the Keras side (session.py, epochs.py).
Plain data: never imports Keras, TensorFlow or the loader."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.schema import Config
from app.training.checkpoint import RunState
from app.training.rundir import Summary


@dataclass(kw_only=True)
class RunContext:
    config: Config  # loaded and validated once (app/config.py); `auto` resolved once the queue is planned
    run_dir: Path
    summary: Summary  # this process's summary.json
    state: RunState  # where the run is: what a checkpoint keeps
    user_callbacks: list  # trainer.callbacks, built before any data is read
