"""The epoch loop of a run: order, steps, validation, the callbacks' hooks as `fit` fires them, each epoch's record."""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import keras
import numpy as np
import psutil

from app import model as models
from app.capacity.copy_advice import CopyAdvice
from app.capacity.diagnosis import diagnose
from app.capacity.memory import PeakMemory
from app.loader.order import draws_of, epoch_order, full_batches
from app.loader.pipeline import Loader
from app.processes import signals_held
from app.runs.checkpoint import PREFIX, EpochFigures, delete_stale_checkpoints, write_checkpoint
from app.runs.tables import append_metrics
from app.tracking import dashboards
from app.training import recipe
from app.training.callbacks import CallbackStates, Profile, Progress, SampleRecorder, StepCheckpoint
from app.training.context import RunContext
from app.training.devices import Placement
from app.training.replicas import average_moving_statistics, metric_state, restore_metrics
from app.training.shares import mirrored_sizes, regrouped, train_share, validation_share
from app.training.steps import EpochPlan, Feed, build_step_variables, sync, train_epoch, validate

log = logging.getLogger("app.train")


@dataclass(kw_only=True)
class Epochs:
    context: RunContext  # the run's config, directory, summary, state and the user's callbacks
    placement: Placement
    source: object
    head: recipe.Head  # the classes, and whether an image shows several
    steps: int  # training steps an epoch
    net: keras.Model
    loader: Loader
    memory: PeakMemory
    class_weights: np.ndarray | None = None  # trainer.class_weight, a weight a class index
    sample_weights: np.ndarray | None = None  # data.sampling's, a training sample each (None: uniform)
    cure: CopyAdvice | None = None  # a prepared copy's advice, where the run is not on one
    kept: CallbackStates = field(init=False)
    out: dashboards.Writer = field(init=False)
    saves: Path = field(init=False)  # where checkpoints and model.keras go: run_dir, or a scratch directory
    progress: Progress | None = field(init=False, default=None)  # the bars, in the process that writes

    def train_and_write_checkpoints(self) -> None:
        """Process 0 writes the run dir; others save (collective on JAX) into a scratch dir removed at the end."""
        self.saves = self.context.run_dir if self.writes else Path(tempfile.mkdtemp(prefix="app-process-"))
        try:
            self._run()
        finally:
            if not self.writes:
                shutil.rmtree(self.saves, ignore_errors=True)

    def _run(self) -> None:
        run = self.context
        self.out = dashboards.writers(run.config.logger, run.run_dir) if self.writes else dashboards.Writer()
        self.out.begin(run.state.config, trial=str(run.run_dir), step=run.state.steps_done)
        try:
            self._epochs()
        except BaseException as error:  # an MLflow run ends as failed or killed, its files kept
            if self.progress is not None:
                self.progress.close()
            try:
                self.out.finish_and_upload("interrupted" if isinstance(error, KeyboardInterrupt) else "failed")
            except Exception as failure:  # the run's own error is the one to report
                log.warning("dashboards: the run's end could not be recorded: %s", failure)
            raise

    def _epochs(self) -> None:
        epochs, state = self.context.config.trainer.epochs, self.context.state
        callbacks = self._callbacks()
        self.net.stop_training = False
        build_step_variables(self.net)  # before a callback makes the train function (JAX fixes its state's shape then)
        callbacks.on_train_begin()
        self.kept = CallbackStates(self.context.user_callbacks)
        self.kept.started(state.callbacks, state.callback_arrays)
        if state.epoch >= epochs:
            log.info("%d epochs of %s are done already (trainer.epochs=%d): `python -m app train resume=%s "
                     "trainer.epochs=%d` trains it further (any number above %d)", state.epoch,
                     self.context.run_dir, epochs, self.context.run_dir, state.epoch + 1, state.epoch)
        logs = None
        while state.epoch < epochs:
            logs = self._epoch(callbacks)
            if self.net.stop_training:
                log.info("a callback stopped training after epoch %d", state.epoch)
                break
        callbacks.on_train_end(logs)

    @property
    def writes(self) -> bool:
        return self.placement.writes

    def _callbacks(self) -> keras.callbacks.CallbackList:
        trainer, epochs = self.context.config.trainer, self.context.config.trainer.epochs
        dashboard = dashboards.Dashboard(self.out, self.context.state, self.memory, self.loader.telemetry)
        shown = self.head.task.monitor.removeprefix("val_")  # the task's own figure beside the loss
        self.progress = Progress(epochs, self.steps, shown) if self.writes else None
        own = [self.progress, dashboard] if self.writes else []
        # A step's row is written before its checkpoint: a run killed between the two would
        # otherwise resume after a step that samples.csv never recorded.
        if trainer.record_samples and self.writes:
            where = self.source.train.place_of(self.context.config.seed)  # patches: each sample's place too
            own.append(SampleRecorder(self.context.run_dir / "samples.csv", self.context.config.data.batch_size,
                                      self.context.state, where))
        if trainer.profile_steps and self.writes:
            own.append(Profile(list(trainer.profile_steps), self.context.run_dir / dashboards.EVENTS,
                               self.context.state))
        # Last: the state a checkpoint keeps is every other callback's after this step.
        last = ([StepCheckpoint(trainer.checkpoint_every_steps, self.steps, self._save_inside_epoch)]
                if trainer.checkpoint_every_steps else [])
        return keras.callbacks.CallbackList(own + self.context.user_callbacks + last, model=self.net, epochs=epochs,
                                            steps=self.steps)

    def _epoch(self, callbacks: keras.callbacks.CallbackList) -> dict:
        """Train one epoch (or the rest of a resumed one), validate, record; the epoch's logs."""
        state, config = self.context.state, self.context.config
        batch, epoch, trainer = config.data.batch_size, state.epoch, config.trainer
        permutation = epoch_order(len(self.source.train), seed=config.seed, epoch=epoch, shuffle=config.queue.shuffle,
                                  weights=self.sample_weights)
        state.order = full_batches(permutation, batch)[: self.steps * batch]
        draws = None if self.sample_weights is None else draws_of(state.order)
        resumed = state.figures is not None
        state.figures = state.figures or EpochFigures()
        first = state.figures.steps
        recipe.freeze_or_unfreeze_recompiling(self.net, self.context.config, epoch, self.head)
        build_step_variables(self.net)  # again: (un)freezing recompiles
        self.net.reset_metrics()
        if resumed and state.figures.metric_state:  # Keras's means go on from the checkpoint's
            restore_metrics(self.net, state.figures.metric_state)
        callbacks.on_epoch_begin(epoch, {"first_batch": first})
        place = self.placement
        mine = train_share(state.order[first * batch:], batch, place.processes, place.process)
        my_draws = None if draws is None else train_share(draws[first * batch:], batch, place.processes, place.process)
        source = self.loader.batches("train", mine, epoch, my_draws)
        if state.steps_done == 0 and self.writes:
            source = self._showing_first(source)
        feed = Feed(source, self.steps - first, self.class_weights)
        plan = EpochPlan(steps=self.steps, batch_size=batch, first=first, log_every=trainer.log_every_steps,
                         checkpoint_every=trainer.checkpoint_every_steps)
        fit = train_epoch(self.net, feed, callbacks, figures=state.figures, plan=plan)
        average_moving_statistics(self.net)  # validation and the checkpoint: one model on every replica
        val = validate(self.net, self._validation_feed(), callbacks)
        row = {"epoch": epoch + 1, **fit.logs, **{f"val_{name}": value for name, value in val.items()},
               "images_per_s": fit.images_per_s, "data_wait_fraction": fit.data_wait_fraction,
               "ring_wait_fraction": fit.ring_wait_fraction, "device_copy_fraction": fit.device_copy_fraction,
               "device_copy_ms": fit.device_copy_ms,
               **self.memory.window_peaks_mb(), **self._loader_figures()}
        # numbers only: Keras's own TensorBoard callback writes every value it is given as a scalar
        logs = {k: v for k, v in row.items() if k != "epoch" and isinstance(v, (int, float))}
        callbacks.on_epoch_end(epoch, logs)
        row["diagnosis"] = diagnose(row, self.loader.queue, self.budget_mib, self.cure,
                                    drafted=self.context.config.data.decode.draft)
        with signals_held():  # the row, model.keras and the checkpoint: all of them or none
            self._record(row, fit.steps)
        return logs

    @property
    def budget_mib(self) -> float:
        """The memory the run may take: queue.memory_budget_mb, else the machine's."""
        budget = self.context.config.queue.memory_budget_mb
        return float(budget) if budget is not None else psutil.virtual_memory().total / 2**20

    def _loader_figures(self) -> dict:
        """The loader's epoch telemetry, workers restarted and samples skipped so far this run."""
        return {**self.loader.telemetry("epoch"), "restarted_workers": self.loader.restarts,
                "skipped_samples": self.loader.skipped}

    def _validation_feed(self) -> Feed:
        """All validation samples in order, batched per shares.py; or trainer.validation_steps of validation_sample."""
        config, place = self.context.config, self.placement
        batch, limit = config.data.batch_size, config.trainer.validation_steps
        labels = self.source.val.labels
        samples = validation_sample(self.head.task.targets.stratum(labels), limit * batch if limit else len(labels),
                                    self.context.config.seed)
        n = len(samples)
        if place.strategy_name == "mirrored":  # no replica without a row
            sizes = mirrored_sizes(n, batch, place.replicas)
            return Feed(regrouped(self.loader.batches("val", samples, 0), sizes), len(sizes))
        if place.strategy_name != "data_parallel":
            return Feed(self.loader.batches("val", samples, 0), math.ceil(n / batch))
        share = validation_share(n, batch, place.processes, place.process)
        return Feed(regrouped(self.loader.batches("val", samples[share.rows], 0), share.sizes), share.batches,
                    whole_last=share.whole_last)

    def _showing_first(self, source):
        """The batches, the first one also drawn (augmented.png, the dashboard's images)."""
        iterator = iter(source)
        first = next(iterator, None)
        if first is None:
            return
        dashboards.write_first_batch(self.out, self.context.run_dir, first, self.source.class_names)
        yield first
        del first
        yield from iterator

    def _save_inside_epoch(self, done: int) -> None:
        """A checkpoint after `done` steps of the running epoch, with Keras's metric variables."""
        sync(self.net)
        average_moving_statistics(self.net)  # as the epoch's end does: a resumed run goes on from the same
        state = self.context.state
        state.figures.metric_state = metric_state(self.net)
        state.callbacks, arrays = self.kept.changed()
        self.out.checkpointed(state.steps_before_epoch + done)  # before: a kill between the two redoes no step
        self._write_checkpoint_and_delete_stale(state.steps_before_epoch + done, state.checkpoint(done, complete=False),
                                                arrays)

    def _write_checkpoint_and_delete_stale(self, step: int, state: dict, arrays: dict) -> None:
        """The checkpoint of `step` (frozen backbone included); then all but the newest few and the best deleted."""
        with recipe.all_trainable(self.net):
            write_checkpoint(self.net, self.saves, step, state, arrays=arrays)
        delete_stale_checkpoints(self.saves, best=(state.get("best") or [None, None])[1])

    def _record(self, row: dict, steps_done: int) -> None:
        """The epoch's metrics.csv row (process 0), model.keras when best, checkpoint, summary.json, log line."""
        state = self.context.state
        step = state.steps_before_epoch + steps_done
        if self.writes:
            append_metrics(self.context.run_dir / "metrics.csv", row)
        trainer = self.context.config.trainer
        name = self.head.monitor(trainer)
        mode = recipe.monitor_mode(trainer, name)
        monitored = row[name]
        if recipe.better(mode, monitored, state.best and state.best[0]):
            state.best = [monitored, f"{PREFIX}{step:08d}"]
            models.write_model_keras(self.net, self.saves / "model.keras", class_names=self.source.class_names,
                          image_size=list(self.context.config.data.image_size))
        state.figures.metric_state = {}
        state.callbacks, arrays = self.kept.changed()
        self.out.checkpointed(step)
        self._write_checkpoint_and_delete_stale(step, state.checkpoint(steps_done, complete=True, metrics=row), arrays)
        peak = max(self.memory.peak / 2**20, self.context.summary.content.get("peak_memory_mb") or 0)
        judged = {**({"val_accuracy": row["val_accuracy"]} if "val_accuracy" in row else {}),
                  name: monitored}  # the monitor's under its name
        self.context.summary.update(epochs_completed=row["epoch"], steps=step, loss=row["loss"], **judged,
                            best={"monitor": name, "mode": mode,
                                  "value": state.best[0], "checkpoint": state.best[1]},
                            images_per_s=row["images_per_s"], data_wait_fraction=row["data_wait_fraction"],
                            ring_wait_fraction=row["ring_wait_fraction"], device_copy_ms=row["device_copy_ms"],
                            peak_memory_mb=peak, restarted_workers=self.loader.restarts,
                            diagnosis=row["diagnosis"])
        shown = self.head.task.monitor.removeprefix("val_")  # the task's own figure: accuracy, auc, miou
        kind = (shown, f"val_{shown}")
        log.info("epoch %d/%d: loss %.4f, %s %.3f, val_loss %.4f, %s %.3f, %.1f img/s, data wait %.0f%%, peak %.0f MiB",
                 row["epoch"], self.context.config.trainer.epochs, row["loss"], kind[0], row[kind[0]], row["val_loss"],
                 kind[1], row[kind[1]], row["images_per_s"], 100 * row["data_wait_fraction"], row["peak_memory_mb"])
        log.info("epoch %d/%d: %s; %s", row["epoch"], self.context.config.trainer.epochs, _loader_line(row),
                 row["diagnosis"])
        state.epoch, state.steps_before_epoch, state.figures = row["epoch"], step, None


def validation_sample(strata: np.ndarray, n: int, seed: int) -> np.ndarray:
    """`n` validation samples (all if n ≥ their count) in file order, drawn by `seed` keeping each stratum's share
    (a sample's class, its task's `stratum`)."""
    if n >= len(strata):
        return np.arange(len(strata))
    drawn = np.random.default_rng(seed).permutation(len(strata))
    classes = strata[drawn]
    rank = np.zeros(len(drawn))  # each drawn sample's place among its class's
    for label in np.unique(classes):
        mine = classes == label
        rank[mine] = np.arange(mine.sum())
    # a class of c samples takes its k-th at (k + ½)/c of the way: the first n are proportional
    due = (rank + 0.5) / np.bincount(classes)[classes]
    return np.sort(drawn[np.argsort(due, kind="stable")[:n]])


def _loader_line(row: dict) -> str:
    stages = " + ".join(f"{name} {row[f'{name}_ms']:.2f}" for name in ("read", "decode", "augment", "copy")
                        if row.get(f"{name}_ms") is not None)
    ring = f"ring {100 * row['ring_fill']:.0f} % full when asked" if row.get("ring_fill") is not None else "no ring"
    ring += f", {100 * row['ring_wait_fraction']:.0f} % of the epoch waiting for it" + (
        f" (a batch to the device {row['device_copy_ms']:.1f} ms, ahead of the step)"
        if row.get("device_copy_ms") is not None else "")
    return (f"a sample {stages or 'n/a'} ms in a worker, {ring}, peak trainer {row['peak_trainer_mb']:.0f} + "
            f"workers {row['peak_workers_mb']:.0f} MiB, {row['restarted_workers']} workers restarted, "
            f"{row['skipped_samples']} samples skipped"
            + (f", {row['storage_retries']} storage reads tried again" if row.get("storage_retries") else ""))
