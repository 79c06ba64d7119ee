"""A run's Keras side: devices, data, the model (new or the checkpoint's), the queue plan, the loader, the epochs."""

from __future__ import annotations

import logging
from pathlib import Path

import keras

from app import model as models
from app.capacity.auto import Asked, asked
from app.capacity.copy_advice import CopyAdvice
from app.capacity.memory import PeakMemory
from app.capacity.queue_plan import check_and_write_plan
from app.capacity.run_plan import RunPlan
from app.data.pixels.pixels import run_pixels
from app.inference import restore
from app.inference.restore import ResumePoint
from app.runs.checkpoint import RunState
from app.runs.tables import check_history, rows_kept, write_rows
from app.schema import Config, schema_of
from app.schema.data import PreparedDataConfig
from app.tasks import task_of
from app.tracking import dashboards
from app.training import calibration, devices, inputs, recipe
from app.training.context import RunContext
from app.training.epochs import Epochs

log = logging.getLogger("app.train")


def train(run: RunContext) -> None:
    config = run.config
    placement = start_keras(config)  # first: the processes of a data_parallel run join here
    if placement.processes > 1:
        devices.check_one_run_dir(run.run_dir)
    source, steps = inputs.read_data(config, run.run_dir)
    if not config.resume and placement.writes:  # the process that writes the run directory
        inputs.delete_partial_records_and_write_split(run.run_dir, source)
    inputs.check_validation_rows(len(source.val), placement)
    task = task_of(config.data.task)
    in_loss, weights = task.weighed(recipe.class_weights(config.trainer, source.train.labels, source.class_names,
                                                         targets=task.targets))
    head = recipe.Head(source.class_names, task, pos_weight=in_loss, ignore_index=config.data.ignore_index)
    recipe.check_monitor(config.trainer, head)
    drawn = inputs.sampling_weights(config.data, source)
    if weights is not None and drawn is not None:
        log.warning("trainer.class_weight and data.sampling=%s both weigh the classes: each epoch's draws are "
                    "reweighted again by the split's counts; keep one", config.data.sampling.value)
    summary = run.summary
    try:
        summary.update(hardware={**summary.content["hardware"], "gpus": placement.gpus}, **placement.record())
        with placement.scope():  # model, optimizer, metrics and steps on the strategy's replicas
            pixels = run_pixels(config.data, source.train)
            net, point = _model(run, head, steps, pixels)
            plan = RunPlan.of(config.data, processes=placement.processes, device_is_host=not placement.gpus,
                              pixels=pixels, asked=asked_queue(config, placement, summary))
            plans = calibration.planner(config, plan, source, net)
            plan = calibration.probed(plans, source.train, net, class_weights=weights)
            if plan.choice:
                summary.update(queue_auto=plan.choice.record())
            predicted = check_and_write_plan(plan, plans, summary)
            loader = inputs.run_loader(config, plan, source, run_dir=run.run_dir, placement=placement)
            summary.update(queue_bytes=loader.queue_bytes)
            with loader, PeakMemory() as memory:
                if point and placement.writes:  # what may refuse the resume, before the run counts as running
                    _drop_records_after(run.run_dir, run.state.epoch, point.state["step"],
                                        config.trainer.record_samples)
                    _write_export_again(run, source, point)
                summary.start()
                Epochs(context=run, placement=placement, source=source, head=head, steps=steps, net=net, loader=loader,
                       memory=memory, class_weights=weights, sample_weights=drawn,
                       cure=_copy_advice(config, source, plan, summary)).train_and_write_checkpoints()
            _log_memory(predicted, summary.content.get("peak_memory_mb") or 0)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def asked_queue(config: Config, placement: devices.Placement, summary) -> Asked:
    """queue.workers and max_size as asked, a null made this machine's (a resume: its start's), logged and recorded."""
    kept = summary.content.get("queue_default") if config.resume else None
    given = asked(config.queue, placement.gpus, kept)
    if given.reason:
        log.info("queue: %s", given.reason)
    if given.reason and kept is None:  # a resume's record stays its start's
        summary.update(queue_default=given.record())
    return given


def _copy_advice(config: Config, source, plan: RunPlan, summary) -> CopyAdvice | None:
    """What the diagnosis advises of a prepared copy (its commands, its pace); None on one already."""
    if schema_of(config.data) is PreparedDataConfig:
        return None
    return CopyAdvice(config, source.train, pixels=plan.pixels, overrides=summary.content["overrides"],
                      batch_size=plan.batch_size)


def _log_memory(predicted: float | None, measured: float) -> None:
    if predicted and measured:
        log.info("memory: host peak %.0f MiB measured, %.0f MiB predicted (%+.0f %%)", measured, predicted,
                 100 * (predicted - measured) / measured)


def start_keras(config: Config) -> devices.Placement:
    """The devices the run trains on, Keras's session cleared and seeded, determinism and precision set."""
    keras.backend.clear_session()  # before the devices: it forgets keras.distribution's too
    placement = devices.place(config)  # before any TensorFlow op: logical CPU devices are fixed then
    keras.utils.set_random_seed(config.seed)
    if config.trainer.deterministic and config.trainer.backend == "tensorflow":  # JAX: XLA's flag (frameworks)
        import tensorflow as tf  # TensorFlow only on its own backend: a JAX run never loads it

        tf.config.experimental.enable_op_determinism()
    devices.set_precision(config.trainer)
    return placement


def _model(run: RunContext, head: recipe.Head, steps: int, pixels) -> tuple[keras.Model, ResumePoint | None]:
    """(a new compiled model, None), or on resume (the checkpoint's model, the checkpoint) with run.state restored."""
    config = run.config
    if not config.resume:
        return recipe.new_compiled_model(config, head, steps, pixels), None
    models.import_builder(config.model)
    point = restore.resume_point(run.run_dir, epochs=config.trainer.epochs)
    run.state.restore(point.state, point.arrays)
    log.info("resuming from %s: step %d done (epoch %d, batch %d); continuing at step %d", point.path.name,
             point.state["step"], point.state["epoch"] + 1, point.state["batch_in_epoch"], point.state["step"] + 1)
    return point.model, point


def _drop_records_after(run_dir: Path, epoch: int, step: int, samples: bool) -> None:
    """What the run wrote after its checkpoint (step `step`, epoch `epoch`) dropped: redone, not duplicated."""
    by_step = (lambda row: int(row["step"]) <= step, "step")  # scalars.csv too: every file read before any is written
    keep = {"metrics.csv": (lambda row: int(row["epoch"]) <= epoch, "epoch"), "samples.csv": by_step,
            dashboards.SCALARS: by_step}
    kept = {name: rows_kept(run_dir / name, *test) for name, test in keep.items()}
    check_history(run_dir, kept, epoch, step if samples else 0)
    for name, rows in kept.items():
        if rows is not None:
            write_rows(run_dir / name, *rows)
    dashboards.rewrite_without_events_after(run_dir, step)


def _write_export_again(run: RunContext, source, point: ResumePoint) -> None:
    """model.keras, when missing or damaged, written again from the best checkpoint."""
    state: RunState = run.state
    path = run.run_dir / "model.keras"
    problem = models.model_keras_problem(path) if state.best else None
    if problem is None:
        return
    best = point.model if point.path.name == state.best[1] else restore.load_model(run.run_dir, state.best[1])
    models.write_model_keras(best, path, class_names=source.class_names, image_size=list(run.config.data.image_size))
    log.warning("%s: %s; written again from the best checkpoint, %s", path, problem, state.best[1])
