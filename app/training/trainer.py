"""Training: config → data → loader → model → epochs (app/training/epochs.py) → run directory.

Checks that need no data run first: the config, the augmentation and the callbacks (when there
are any, building them loads TensorFlow); then the data, then the model. The run directory is
locked while it trains (app/training/rundir.py).
Never imports the loader's internals: only app/loader/pipeline.py and order.py.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from omegaconf import DictConfig

from app import rules
from app.augment import build_compose, eval_transforms
from app.config import instantiate_each, load, to_plain
from app.console import print_config
from app.data import load_source
from app.data.source import overfitting
from app.errors import AppError, config_error, explain
from app.frameworks import load_keras, use_backend
from app.loader.pipeline import build_loader
from app.memory import PeakMemory, leftovers_cleared
from app.processes import interrupts
from app.schema import Config
from app.training import checkpoint, rundir
from app.training.checkpoint import RunState
from app.training.resume import resumed_config
from app.training.rundata import run_source
from app.training.rundir import Summary, hold_lock, log_apart, release_lock, write_json
from app.training.tables import check_history, rows_kept, write_rows

log = logging.getLogger("app.train")


def run(cfg: DictConfig, run_dir: Path, overrides: list[str]) -> dict:
    """Train as `cfg` says, writing into `run_dir`; with `resume`, continue the run there.
    Returns summary.json's content."""
    run_dir = Path(run_dir)
    resumed = cfg.resume
    try:
        if resumed:  # the config is the checkpoint's, with the safe overrides (app/training/resume.py)
            cfg = resumed_config(checkpoint.saved_config(run_dir), cfg, overrides)
        # Everything that can be checked without data, first; the callbacks need Keras.
        config = load(cfg)  # validated once; the one object every step below reads
        use_backend(config.trainer)  # before anything loads Keras
        if config.print_config:
            print_config(to_plain(config), f"config of {run_dir}")
        build_compose(config.augment.transforms, config.data.image_size)  # strict: misspellings fail
        callbacks = user_callbacks(config.trainer.callbacks)
    except AppError as error:
        if not resumed:  # a sweep's report shows the job as failed, with the reason
            Summary(run_dir, overrides).update(status="failed", message=str(error))
        raise

    from app.training import devices

    process = devices.expected_process(config.trainer)
    if process:  # one of several: process 0 writes the run directory, this one its own log and summary
        log_apart(run_dir, process)
    else:
        hold_lock(run_dir, f"python -m app train{' resume=...' if resumed else ''}")
    try:
        summary = Summary(run_dir, overrides, resumed_from=resumed,
                          name=f"summary.{process}.json" if process else "summary.json")
        summary.update(isolation=leftovers_cleared(), pid=os.getpid(), tags=list(config.tags))
        _train_recorded(config, run_dir, summary, callbacks)
    finally:
        release_lock(run_dir)
    return summary.content


def _train_recorded(config: Config, run_dir: Path, summary: Summary, callbacks: list) -> None:
    """Train, and record how it ended in summary.json and the log."""
    state = RunState(config=to_plain(config))
    try:
        with interrupts():
            _train(config, run_dir, summary, state, callbacks)
        summary.update(status="completed")
    except KeyboardInterrupt:
        if summary.started:  # a resume stopped before it trained leaves the run as it was
            _record(summary, status="interrupted")
        log.warning("interrupted after step %d; %s", state.steps_done, _continue_hint(run_dir))
        raise
    except BaseException as error:
        hint = f"python -m app train resume={run_dir}" if checkpoint.newest(run_dir) else None
        explained = explain(error, resume_hint=hint, where=str(run_dir))
        if summary.started:
            _record(summary, status="failed", message=str(explained))
            log.error("failed: %s", explained)
        else:  # a resume refused before it trained: nothing in the run changes
            log.error("not resumed (the run is as it was): %s", explained)
        if getattr(error, "worker_traceback", None):
            log.error("worker traceback:\n%s", error.worker_traceback)
        elif not isinstance(explained, AppError):  # a bug: keep its traceback
            log.exception("traceback")
        if explained is not error:
            raise explained from error
        raise


def user_callbacks(specs: list) -> list:
    """`trainer.callbacks`, instantiated before any data is read, so a wrong `_target_` or
    argument fails at once, naming the entry."""
    if not specs:
        return []
    keras = load_keras()  # Keras (and TensorFlow) start here: the callbacks are Keras objects

    built = instantiate_each(specs, "trainer.callbacks", keras.callbacks.Callback, "keras.callbacks.<Callback>")
    for i, callback in enumerate(built):
        if isinstance(callback, keras.callbacks.BackupAndRestore):
            raise config_error(f"trainer.callbacks[{i}]", specs[i]["_target_"],
                               "every run already checkpoints itself (each epoch, and every "
                               "trainer.checkpoint_every_steps) and continues at the exact step with "
                               "`train resume=<run dir>` or `resume=latest`; drop BackupAndRestore")
    return built


def _record(summary: Summary, **values) -> None:
    """The run's status in summary.json, as far as the disk allows (it may be the disk that failed)."""
    try:
        summary.update(**values)
    except OSError as error:
        log.error("could not record status %s in %s: %s", values.get("status"), summary.path, error)


def _continue_hint(run_dir: Path) -> str:
    saved = checkpoint.newest(run_dir)
    if not saved:
        return (f"no checkpoint was written yet, so there is nothing to resume: run the same command again "
                f"({run_dir} holds nothing a new run there would lose)")
    return (f"its last checkpoint is {saved[0].name}: `python -m app train resume={run_dir}` continues "
            "from there")


def _train(config: Config, run_dir: Path, summary: Summary, state: RunState, callbacks: list) -> None:
    keras, placement = _start_keras(config)  # first: the processes of a data_parallel run join here
    if placement.processes > 1:
        from app.training import devices

        devices.check_one_run_dir(run_dir)
    source, steps = _data(config, run_dir, placement.writes)
    from app.training import autotune, queue_plan, recipe

    recipe.check_monitor(config, source.class_names)
    _check_validation_rows(len(source.val), placement)
    weights = recipe.class_weights(config, source.train.labels, source.class_names)
    try:
        summary.update(hardware={**summary.content["hardware"], "gpus": placement.gpus}, **placement.record())
        with placement.scope():  # model, optimizer, metrics and steps on the strategy's replicas
            net, point = _model(config, source, run_dir, state, steps)
            plans = queue_plan.planner(config, source.train, net, device_is_host=not placement.gpus)
            choice = queue_plan.probed(_share(config, placement), source.train, net, plans, weights)
            if choice:
                config = autotune.applied(config, choice)
                summary.update(queue_auto=choice.record())
            predicted = queue_plan.checked(config, plans, summary)
            loader = _loader(config, source, run_dir, placement)
            summary.update(queue_bytes=loader.queue.bytes)
            from app.training.epochs import Epochs  # Keras is loaded by now

            with loader, PeakMemory() as memory:
                if point and placement.writes:  # what may refuse the resume, before the run counts as running
                    _redo_after(run_dir, state.epoch, point.state["step"], config.trainer.record_samples)
                    _export_again(config, run_dir, source, state, point)
                summary.start()
                Epochs(config, run_dir, summary, state, source, steps, net, loader, memory, callbacks, placement,
                       weights).run()
            measured = summary.content.get("peak_memory_mb") or 0
            if predicted and measured:
                log.info("memory: host peak %.0f MiB measured, %.0f MiB predicted (%+.0f %%)", measured, predicted,
                         100 * (predicted - measured) / measured)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _check_validation_rows(n: int, placement) -> None:
    """Under mirrored every replica validates at least one sample (app/training/shards.py)."""
    if placement.strategy_name == "mirrored" and 0 < n < placement.replicas:
        raise config_error("trainer.strategy", "mirrored", f"the validation split has {n} sample(s), fewer than "
                           f"its {placement.replicas} replicas ({', '.join(placement.devices)}), one each at least: "
                           "add validation images, fewer devices (trainer.cpu_devices) or trainer.strategy=default")


def _share(config: Config, placement) -> Config:
    """`config` with data.batch_size this process's rows of each global batch: its share under
    data_parallel over several processes, else the whole batch."""
    local = config.data.batch_size // placement.processes
    return dataclasses.replace(config, data=dataclasses.replace(config.data, batch_size=local))


def _loader(config: Config, source, run_dir: Path, placement):
    """The loader of this process's rows: its share of each global batch (data_parallel over
    several processes), else the whole batch."""
    local = config.data.batch_size // placement.processes
    bad = "bad_samples.txt" if placement.writes else f"bad_samples.{placement.process}.txt"
    loader = build_loader(config, {"train": (source.train, config.augment.transforms),
                                  "val": (source.val, eval_transforms(config.augment, config.data.image_size))},
                         bad_log=run_dir / bad, batch_size=local)
    queue = loader.queue
    log.info("queue: %d %s, max_size %d: %.1f MiB of uint8 batches%s", queue.workers,
             "processes" if queue.processes else "threads", queue.max_size, queue.bytes / 2**20,
             f" of {local} rows (this process's share of each batch)" if placement.processes > 1 else "")
    return loader


def _data(config: Config, run_dir: Path, writes: bool = True):
    """(the data source, training steps an epoch): split.json written (by the process that
    writes the run directory), or checked on resume."""
    batch, overfit = config.data.batch_size, config.trainer.overfit_batches
    source = run_source(run_dir, config.data) if config.resume else load_source(config.data)
    if overfit:
        if len(source.train) < overfit * batch:
            raise config_error("trainer.overfit_batches", overfit, f"the training split has {len(source.train)} "
                               f"samples, fewer than {overfit} batches of data.batch_size={batch}")
        source = overfitting(source, overfit * batch, config.seed)
        log.info("overfitting: training and validating on the same %d samples every epoch", len(source.train))
    if not config.resume and writes:
        rundir.delete_partial_records(run_dir)
        write_json(run_dir / "split.json", source.split)
    available = len(source.train) // batch
    if available == 0:
        raise config_error("data.batch_size", batch, f"the training split has only {len(source.train)} samples, "
                           "fewer than one full batch")
    steps = config.trainer.steps_per_epoch or available
    if steps > available:
        raise config_error("trainer.steps_per_epoch", steps, f"the training split has {available} full batches "
                           f"of data.batch_size={batch} (null uses them all)")
    rules.check_run_length(config.trainer, steps)
    log.info("data: %s, %d classes, %d training and %d validation samples, fingerprint %s",
             source.name, len(source.class_names), len(source.train), len(source.val), source.fingerprint[:12])
    return source, steps


def _start_keras(config: Config):
    """Keras and the devices the run trains on, seeded, with the run's determinism and precision.
    The backend starts here, after every check that needs neither it nor the data."""
    keras = load_keras()
    from app.training import devices

    keras.backend.clear_session()  # before the devices: it forgets keras.distribution's too
    placement = devices.place(config)  # before any TensorFlow op: logical CPU devices are fixed then
    keras.utils.set_random_seed(config.seed)
    if config.trainer.deterministic and config.trainer.backend == "tensorflow":  # JAX: XLA's flag (frameworks)
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    devices.set_precision(config)
    return keras, placement


def _model(config: Config, source, run_dir: Path, state: RunState, steps: int):
    """(a new compiled classifier, None), or on resume (the checkpoint's, the checkpoint) with
    `state` restored from it."""
    from app import model as models
    from app.training import recipe

    if not config.resume:
        net = models.build(config.model, config.data.image_size, len(source.class_names))
        recipe.compile_new(net, config, steps, source.class_names)
        return net, None
    models.import_builder(config.model)
    point = checkpoint.resume_point(run_dir, epochs=config.trainer.epochs)
    state.restore(point.state, point.arrays)
    log.info("resuming from %s: step %d done (epoch %d, batch %d); continuing at step %d", point.path.name,
             point.state["step"], point.state["epoch"] + 1, point.state["batch_in_epoch"], point.state["step"] + 1)
    return point.model, point


def _redo_after(run_dir: Path, epoch: int, step: int, samples: bool) -> None:
    """What the run wrote after its checkpoint (step `step`, epoch `epoch`) dropped: redone, not duplicated."""
    from app.training import dashboards

    by_step = (lambda row: int(row["step"]) <= step, "step")  # scalars.csv too: every file read before any is written
    keep = {"metrics.csv": (lambda row: int(row["epoch"]) <= epoch, "epoch"), "samples.csv": by_step,
            dashboards.SCALARS: by_step}
    kept = {name: rows_kept(run_dir / name, *test) for name, test in keep.items()}
    check_history(run_dir, kept, epoch, step if samples else 0)
    for name, rows in kept.items():
        if rows is not None:
            write_rows(run_dir / name, *rows)
    dashboards.trim(run_dir, step)


def _export_again(config: Config, run_dir: Path, source, state: RunState, point) -> None:
    """model.keras, when missing or damaged, written again from the best checkpoint (the weights
    it was exported with at that epoch's end)."""
    from app import model as models

    path = run_dir / "model.keras"
    problem = models.exported_problem(path) if state.best else None
    if problem is None:
        return
    best = point.model if point.path.name == state.best[1] else checkpoint.load_model(run_dir, state.best[1])
    models.export(best, path, class_names=source.class_names, image_size=list(config.data.image_size))
    log.warning("%s: %s; written again from the best checkpoint, %s", path, problem, state.best[1])
