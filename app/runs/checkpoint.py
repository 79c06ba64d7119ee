"""Checkpoints, written whole or not at all, and where a resume starts."""
# `checkpoints/step-<global step>/`: model.keras (+ optimizer), seed_generators.npy (Dropout), callback_arrays.npz
# (user callbacks), state.json (RunState, config)

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from app.errors import config_error
from app.io import write_json

PREFIX = "step-"
KEEP = 2  # the newest checkpoints kept, besides the best
# Keras's .keras format leaves out the layers' seed generators (Layer.save_own_variables), so a
# resumed Dropout would draw other masks: their states are saved beside it.
SEED_STATES = "seed_generators.npy"
CALLBACK_ARRAYS = "callback_arrays.npz"  # arrays the user's callbacks hold (EarlyStopping's best weights)
log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class EpochFigures:
    """The running epoch, as last read off the device (app/training/steps.py)."""

    steps: int = 0  # batches trained in this epoch
    images: int = 0
    waited_s: float = 0.0  # the step blocked, waiting for its next batch
    ring_wait_s: float = 0.0  # blocked on the ring (ahead of the step where a batch is copied to the device ahead)
    copy_s: float = 0.0  # copying batches to the device, ahead of the step
    copies: int = 0  # batches copied so (none where tf.data copies them unseen)
    seconds: float = 0.0  # from the epoch's start to the end of its last step read
    logs: dict = field(default_factory=dict)  # Keras's running epoch means (loss, accuracy, ...)
    # Keras's metric variables (path → value) at a checkpoint inside the epoch: a resumed epoch
    # goes on accumulating from them, so its means equal an uninterrupted epoch's
    metric_state: dict = field(default_factory=dict)

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds if self.seconds else 0.0

    @property
    def data_wait_fraction(self) -> float:
        return min(self.waited_s / self.seconds, 1.0) if self.seconds else 0.0

    @property
    def ring_wait_fraction(self) -> float:
        return min(self.ring_wait_s / self.seconds, 1.0) if self.seconds else 0.0

    @property
    def device_copy_fraction(self) -> float:
        return min(self.copy_s / self.seconds, 1.0) if self.seconds else 0.0

    @property
    def device_copy_ms(self) -> float | None:
        """A batch's copy to the device, mean milliseconds; None where none was timed."""
        return 1e3 * self.copy_s / self.copies if self.copies else None

    def state(self) -> dict:
        """The running figures, for a checkpoint inside the epoch."""
        return asdict(self)


@dataclass(kw_only=True)
class RunState:
    """Where training is: what a checkpoint stores and what a resume restores."""

    config: dict
    epoch: int = 0  # 0-based, the epoch under way
    steps_before_epoch: int = 0
    order: np.ndarray | None = None  # this epoch's sample indices
    figures: EpochFigures | None = None  # this epoch's running figures
    best: list | None = None  # [val_accuracy, checkpoint name]
    # what training changed in the user's callbacks (app/training/callbacks.py: CallbackStates)
    callbacks: list | None = None
    callback_arrays: dict = field(default_factory=dict)

    @property
    def steps_done(self) -> int:
        """Training steps taken in this run so far, the running epoch's included."""
        return self.steps_before_epoch + (self.figures.steps if self.figures else 0)

    def restore(self, saved: dict, arrays: dict) -> None:
        """Set to where `saved` (state.json) says: after a whole epoch, the next; else that epoch's next batch."""
        self.best, self.callbacks, self.callback_arrays = saved["best"], saved.get("callbacks"), arrays
        if saved["epoch_complete"]:
            self.epoch, self.steps_before_epoch = saved["epoch"] + 1, saved["step"]
        else:
            self.epoch = saved["epoch"]
            self.steps_before_epoch = saved["step"] - saved["batch_in_epoch"]
            known = {f.name for f in fields(EpochFigures)}
            self.figures = EpochFigures(**{k: v for k, v in saved["figures"].items() if k in known})

    def checkpoint(self, batches_done: int, *, complete: bool, metrics: dict | None = None) -> dict:
        return {"epoch": self.epoch, "batch_in_epoch": batches_done, "epoch_complete": complete,
                "step": self.steps_before_epoch + batches_done, "figures": self.figures.state(),
                "best": self.best, "callbacks": self.callbacks, "metrics": metrics, "config": self.config}


def seed_states(model) -> list:
    return [v for v in model.variables if v.name == "seed_generator_state"]


def write_checkpoint(model, run_dir: Path, step: int, state: dict, arrays: dict | None = None) -> Path:
    """The checkpoint of `step` (model, `state`, `arrays`), written whole or not at all; replaces one of that step."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(exist_ok=True)
    final = root / f"{PREFIX}{step:08d}"
    tmp = root / f".{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        model.save(tmp / "model.keras")
        np.save(tmp / SEED_STATES, np.array([np.array(v) for v in seed_states(model)], np.int64).reshape(-1, 2))
        np.savez(tmp / CALLBACK_ARRAYS, **(arrays or {}))
        write_json(tmp / "state.json", state)
    except BaseException:  # a full disk, say: the half-written checkpoint goes, the previous ones stay
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():  # the same step saved mid-epoch: the epoch-end state supersedes it
        old = root / f".{final.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)
    return final


def delete_stale_checkpoints(run_dir: Path, best: str | None) -> None:
    """Deletes every checkpoint but the newest `KEEP` and `best` (a folder's name), each renamed first."""
    root = Path(run_dir) / "checkpoints"
    for stale in sorted(root.glob(f"{PREFIX}*"))[:-KEEP]:
        if stale.name != best:  # renamed first: a kill mid-delete leaves no half checkpoint
            gone = root / f".{stale.name}.gone"
            stale.rename(gone)
            shutil.rmtree(gone, ignore_errors=True)


def newest_first(run_dir: Path) -> list[Path]:
    return sorted((Path(run_dir) / "checkpoints").glob(f"{PREFIX}*"), reverse=True)


def best_name(run_dir: Path) -> str | None:
    """The folder's name of the run's best checkpoint (trainer.monitor's, whose weights model.keras holds), or None."""
    return next((state["best"][1] for state in map(read_state, newest_first(run_dir))
                 if isinstance(state, dict) and state.get("best")), None)


def has_checkpoint(run_dir: Path) -> bool:
    return bool(newest_first(run_dir))


def saved_config(run_dir: Path) -> dict:
    """The config a run was started with, from its newest readable state.json (no TensorFlow)."""
    for path in newest_first(run_dir):
        state = read_state(path)
        if isinstance(state, dict) and "config" in state:
            return state["config"]
    if not has_checkpoint(run_dir):
        raise nothing_to_resume(run_dir)
    raise config_error("resume", str(run_dir), f"no checkpoint of {run_dir} has a readable state.json: restore "
                       "checkpoints/ from a copy of the run, or start a new run")


def nothing_to_resume(run_dir: Path):
    """The error for a folder with no checkpoint, saying why there is none and what to do instead."""
    run_dir = Path(run_dir)
    if (run_dir / "metrics.csv").exists() or (run_dir / "model.keras").exists():
        why = (f"{run_dir} holds a run whose checkpoints/ are gone: restore them from a copy of the run (its "
               "model.keras still serves `predict`), or start a new run")
    elif (run_dir / "summary.json").exists():
        why = (f"{run_dir} holds a run stopped before its first checkpoint, so there is nothing to resume: run the "
               f"command that started it again, with hydra.run.dir={run_dir} (nothing there would be lost)")
    else:
        why = f"{run_dir} is not a run directory (give one that `python -m app train` wrote, or `latest`)"
    return config_error("resume", str(run_dir), why)


def read_state(path: Path) -> dict | None:
    """A checkpoint's state.json, or None when it cannot be read."""
    try:
        return json.loads((path / "state.json").read_text())
    except (OSError, ValueError):
        return None


def walk(run_dir: Path, open_one: Callable[[Path, dict], Any], failures: list[str] | None = None) -> Iterator[tuple]:
    """(path, state, open_one's result) per checkpoint, newest first; failures warned into `failures`, None skipped."""
    for path in newest_first(run_dir):
        try:
            state = json.loads((path / "state.json").read_text())
            opened = open_one(path, state)
        except Exception as error:  # noqa: BLE001 - any unreadable checkpoint is passed over the same way
            reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            log.warning("checkpoint %s cannot be loaded (%s); trying the one before it", path, reason)
            if failures is not None:
                failures.append(f"{path.name}: {reason}")
            continue
        if opened is not None:
            yield path, state, opened
