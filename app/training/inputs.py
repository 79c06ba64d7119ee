"""A training run's inputs, before the model: its data, split.json, this process's share of a batch, its loader."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from app.augment import eval_transforms
from app.capacity.run_plan import RunPlan
from app.data.source import overfitting
from app.errors import DataError, config_error
from app.io import append_tsv, write_json
from app.loader.order import class_balanced
from app.loader.pipeline import Loader, build_loader
from app.runs import rundir
from app.runs.rundata import checked_source
from app.schema import Config
from app.training.devices import Placement

log = logging.getLogger("app.train")


def read_data(config: Config, run_dir: Path):
    """(the data source, training steps an epoch); on resume, checked against the run's split.json."""
    batch, overfit = config.data.batch_size, config.trainer.overfit_batches
    source = checked_source(config, run_dir if config.resume else None)
    if overfit:
        if len(source.train) < overfit * batch:
            raise config_error("trainer.overfit_batches", overfit, f"the training split has {len(source.train)} "
                               f"samples, fewer than {overfit} batches of data.batch_size={batch}")
        source = overfitting(source, overfit * batch, config.seed)
        log.info("overfitting: training and validating on the same %d samples every epoch", len(source.train))
    available = len(source.train) // batch
    if available == 0:
        raise config_error("data.batch_size", batch, f"the training split has only {len(source.train)} samples, "
                           "fewer than one full batch")
    steps = config.trainer.steps_per_epoch or available
    if steps > available:
        raise config_error("trainer.steps_per_epoch", steps, f"the training split has {available} full batches "
                           f"of data.batch_size={batch} (null uses them all)")
    check_run_length(config.trainer, steps)
    patches = source.split.get("patches")
    of = f" (patches of {patches['train']['images']} and {patches['val']['images']} images)" if patches else ""
    log.info("data: %s, %d classes, %d training and %d validation samples%s, fingerprint %s",
             source.name, len(source.class_names), len(source.train), len(source.val), of, source.fingerprint[:12])
    return source, steps


def delete_partial_records_and_write_split(run_dir: Path, source) -> None:
    """A new run's split.json, once what a start stopped before its first checkpoint left is gone; the rows a table's
    check left out (data.on_bad_sample=skip) start bad_samples.txt, as the loader lists a sample it skips."""
    rundir.delete_partial_records(run_dir)
    write_json(run_dir / "split.json", source.split)
    if source.left_out:  # bad_samples.txt is gone (delete_partial_records): these start it
        append_tsv(run_dir / "bad_samples.txt", [("table", line, where, why) for line, where, why in source.left_out])


def sampling_weights(data, source) -> np.ndarray | None:
    """The training samples' weights data.sampling draws each epoch by (None: uniform, each sample once), logged."""
    sampling = str(data.sampling.value)
    if sampling == "uniform":
        return None
    labels = np.asarray(source.train.labels)
    weights = class_balanced(labels) if sampling == "balanced" else np.asarray(source.train_weights, float)
    weights = weights / max(weights.max(), np.finfo(float).tiny)  # huge weights: a sum that stays finite
    if not weights.sum() > 0:
        raise DataError(f"data.sampling={sampling}: every training sample's weight is 0 "
                        f"(data.columns.weight): give some a weight above 0")
    share = np.bincount(labels, weights=weights, minlength=len(source.class_names)) / weights.sum()
    log.info("sampling: %s: each epoch draws its %d training samples with replacement, classes %s; validation "
             "and test as they are", sampling, len(labels),
             ", ".join(f"{name} {100 * s:.0f} %" for name, s in zip(source.class_names, share, strict=True)))
    return weights


def check_validation_rows(n: int, placement: Placement) -> None:
    """A ConfigError when, under mirrored, the validation split has fewer samples than replicas."""
    if placement.strategy_name == "mirrored" and 0 < n < placement.replicas:
        raise config_error("trainer.strategy", "mirrored", f"the validation split has {n} sample(s), fewer than "
                           f"its {placement.replicas} replicas ({', '.join(placement.devices)}), one each at least: "
                           "add validation images, fewer devices (trainer.cpu_devices) or trainer.strategy=default")


def run_loader(config: Config, plan: RunPlan, source, *, run_dir: Path, placement: Placement) -> Loader:
    """This process's loader (not started) as the run plan has it: its share of each global batch, its queue."""
    bad = "bad_samples.txt" if placement.writes else f"bad_samples.{placement.process}.txt"
    settings = plan.loader_settings(config.data, bad_log=run_dir / bad)
    loader = build_loader(config, {"train": (source.train, config.augment.transforms),
                                  "val": (source.val, eval_transforms(config.augment, config.data.image_size))},
                         settings=settings)
    queue = loader.queue
    log.info("queue: %d %s, max_size %d: %.1f MiB of %s batches%s", queue.workers,
             "processes" if queue.use_multiprocessing else "threads", queue.max_size, loader.queue_bytes / 2**20,
             settings.pixels.dtype,
             f" of {plan.batch_size} rows (this process's share of each batch)" if placement.processes > 1 else "")
    return loader


def check_run_length(t, steps: int) -> None:
    """The trainer's keys that count steps, against the steps the run takes (known once its data is)."""
    total = steps * t.epochs
    if t.profile_steps and t.profile_steps[1] > total:
        raise config_error("trainer.profile_steps", list(t.profile_steps), f"steps the run reaches: it has "
                           f"{total} ({t.epochs} epochs of {steps} steps)")
    if t.grad_accum_steps > total:  # the optimizer would never update the weights
        raise config_error("trainer.grad_accum_steps", t.grad_accum_steps, f"at most the steps the run takes, "
                           f"{total} ({t.epochs} epochs of {steps} steps): with more, no update is ever made")
