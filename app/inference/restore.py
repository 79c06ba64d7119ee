"""A run's checkpoints and model.keras loaded again: where a resume starts, what `evaluate` and `predict` use."""

from __future__ import annotations

import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path

import keras
import numpy as np

import app.objectives  # noqa: F401 - registers the recipe's loss and metrics, which checkpoints use
import app.pixel_objectives  # noqa: F401 - as above, a class a pixel's
from app.errors import DataError, config_error
from app.model import import_builder, model_keras_problem, read_metadata
from app.runs import checkpoint

log = logging.getLogger(__name__)


def load_keras_model(path: Path):
    """The Keras model saved at `path` (a .keras file), the recipe's loss and metrics registered."""
    check_whole_archive(path)
    return keras.saving.load_model(path)


def check_whole_archive(path: Path) -> None:
    """A ValueError for a .keras file that is there but no zip archive (Keras would say "File not found")."""
    path = Path(path)
    if path.is_file() and not zipfile.is_zipfile(path):
        raise ValueError(f"{path.name} is there ({path.stat().st_size} bytes) but is not a whole .keras archive: "
                         "cut short or overwritten")


def load_model(run_dir: Path, name: str):
    """The model of checkpoint `name` (step-00000120); a damaged one is a DataError naming it."""
    path = Path(run_dir) / "checkpoints" / name / "model.keras"
    try:
        return load_keras_model(path)
    except Exception as error:  # noqa: BLE001 - any unreadable file is the same for the user
        others = [p.name for p in checkpoint.newest_first(run_dir) if p.name != name]
        why = str(error).splitlines()[0] if str(error) else ""
        instead = f", or use another: {', '.join(others)}" if others else "; the run has no other checkpoint"
        raise DataError(f"{path} cannot be loaded ({type(error).__name__}: {why}): the checkpoint is damaged; "
                        f"restore it from a copy of the run{instead}.") from None


@dataclass
class ResumePoint:
    path: Path
    state: dict
    model: object  # the loaded keras.Model, compiled, with its optimizer
    arrays: dict  # the callbacks' arrays


def resume_point(run_dir: Path, epochs: int | None = None) -> ResumePoint:
    """The newest checkpoint whose state.json and model.keras load; a ConfigError if none does or `epochs` < done."""
    candidates, failures = checkpoint.newest_first(run_dir), []
    for path, state, model in checkpoint.walk(run_dir, _model_with_seeds, failures):
        arrays_file = path / checkpoint.CALLBACK_ARRAYS  # absent in checkpoints of older versions
        arrays = dict(np.load(arrays_file)) if arrays_file.exists() else {}
        _check_epochs_left(run_dir, path, state, epochs)
        return ResumePoint(path, state, model, arrays)
    if not candidates:
        raise config_error("resume", str(run_dir), f"{run_dir} has no checkpoint in checkpoints/ (a run saves one "
                           "at each epoch end and every trainer.checkpoint_every_steps)")
    raise config_error("resume", str(run_dir), f"none of its checkpoints loads ({'; '.join(failures)}): restore "
                       "checkpoints/ from a copy of the run, or start a new run")


def _model_with_seeds(path: Path, state: dict):
    """A checkpoint's model with its Dropout layers' random state put back."""
    model = load_keras_model(path / "model.keras")
    seeds, saved = checkpoint.seed_states(model), np.load(path / checkpoint.SEED_STATES)
    if len(seeds) != len(saved):
        raise ValueError(f"{len(saved)} seed generator states saved for {len(seeds)} in the model")
    for variable, value in zip(seeds, saved, strict=True):
        variable.assign(value)
    return model


def _check_epochs_left(run_dir: Path, path: Path, state: dict, epochs: int | None) -> None:
    """The checkpoint's epoch, finished or under way, is within trainer.epochs: a run is never cut back."""
    if epochs is None or epochs > state["epoch"]:
        return
    least = state["epoch"] + 1
    where = f"{least} epochs done" if state["epoch_complete"] else f"epoch {least} under way"
    raise config_error("trainer.epochs", epochs, f"{least} or more: {run_dir} has {where} (checkpoint {path.name}), "
                       f"and a run is not cut back. Leave trainer.epochs out to go on as set, or "
                       f"`python -m app train resume={run_dir} trainer.epochs={least + 1}` trains it further")


def chosen_checkpoint(run_dir: Path, which: str = "last"):
    """(path, model) of `last` (newest written at an epoch's end), `best` (trainer.monitor's) or a named checkpoint."""
    candidates = checkpoint.newest_first(run_dir)
    names = ", ".join(p.name for p in candidates) or "none"
    if which == "best":
        which = checkpoint.best_name(run_dir)
        if not which:
            raise config_error("checkpoint", "best", f"{run_dir} has no checkpoint marked best yet (there are: "
                               f"{names})")
    if which != "last":
        path = Path(run_dir) / "checkpoints" / which
        if not (path / "model.keras").is_file():
            raise config_error("checkpoint", which, f"last, best, or one of {run_dir}'s checkpoints: {names}")
        return path, load_model(run_dir, which)
    for path, _, model in checkpoint.walk(run_dir, _model_at_epoch_end):
        return path, model
    raise config_error("resume", str(run_dir), "it has no loadable checkpoint written at an epoch's end")


def _model_at_epoch_end(path: Path, state: dict):
    """The checkpoint's model when it was written at an epoch's end; None (passed over) inside one."""
    return load_keras_model(path / "model.keras") if state["epoch_complete"] else None


def builder_imported(model_config) -> None:
    """The run's model builder's module imported: it registers a custom model's layers, which loading needs."""
    import_builder(model_config)


def load_model_keras(run_dir: Path) -> tuple:
    """(model, metadata) of the run's model.keras; a DataError saying how to rewrite a missing or damaged one."""
    path = run_dir / "model.keras"
    problem = model_keras_problem(path)
    if problem is None:
        try:
            return load_keras_model(path), read_metadata(path)
        except Exception as error:  # noqa: BLE001 - whole as a zip, yet Keras cannot rebuild it
            problem = f"Keras cannot load it ({type(error).__name__}: {str(error).splitlines()[0]})"
    raise DataError(f"{path} cannot be used: {problem}. It is the run's best model, and the run's best checkpoint "
                    f"holds the same weights: `python -m app train resume={run_dir}` writes it again from there (and "
                    "trains no further when all its epochs are done). Nothing was changed.")
