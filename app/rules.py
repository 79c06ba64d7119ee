"""The config's ranges and cross-key rules, one function a group: what the schemas' types cannot say. `check` runs
them all on a typed config before any data is read or model built; the first broken rule fails naming its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from app.errors import config_error
from app.families import FAMILIES
from app.io import is_url
from app.processes import worker_limit
from app.rules_labels import check_labels
from app.rules_patches import check_patch_draws, check_patches
from app.schema import BENCH_MODES, DATA_TARGETS, EVAL_TRANSFORMS, LOGGER_TARGETS, SCHEDULER_TARGETS, option_of

AUTO = "auto"  # queue.workers, queue.max_size: chosen when training starts (app/capacity/auto.py)

JIT_COMPILE = {"auto": "auto", "true": True, "false": False}  # trainer.jit_compile → Keras's compile argument


TOP_K = 5  # trainer.top_k=auto's k, with one class an image


def top_k(trainer, classes: int) -> int | None:
    """The k of the top-k accuracy (trainer.top_k, auto: 5); None where there are k classes or fewer, or none asked."""
    k = TOP_K if trainer.top_k == AUTO else trainer.top_k
    return k if k and k < classes else None


SEEDS = 2**32  # Keras's and NumPy's seeding take 0 to 2**32 - 1


def check(cfg) -> None:
    """Every rule, on `cfg` typed by its schemas. Raises ConfigError."""
    _check_seed("seed", cfg.seed)
    _check_data(cfg.data)
    check_labels(cfg)
    check_patches(cfg.data)
    _check_augment(cfg.augment)
    _check_queue(cfg.queue)
    _check_trainer(cfg.trainer)
    _check_devices(cfg.trainer)
    _check_recipe(cfg)
    _check_model(cfg)
    _check_bench_and_preview(cfg)


def _check(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise config_error(key, value, allowed)


def _check_seed(key: str, value: int) -> None:
    _check(0 <= value < SEEDS, key, value, f"an integer from 0 to {SEEDS - 1} (2**32 − 1), e.g. {key}=0")


def _check_data(d) -> None:
    size = list(d.image_size)
    _check(len(size) == 2 and all(s >= 8 for s in size), "data.image_size", size,
           "two integers [H, W], each at least 8")
    _check(d.batch_size >= 1, "data.batch_size", d.batch_size, "an integer of at least 1")
    if d._target_ == DATA_TARGETS["prepared"]:
        _check(d.val_fraction is None, "data.val_fraction", d.val_fraction,
               "null with data=prepared: the copy's validation split is the one `python -m app prepare` wrote. "
               "Drop the override, or prepare the copy again with data.val_fraction set for its source")
        _check(d.cache_max_gb > 0, "data.cache_max_gb", d.cache_max_gb, "a positive number of GB (10⁹ bytes)")
        _check(d.cache_dir is None or is_url(d.path), "data.cache_dir", d.cache_dir,
               f"null for a copy in a local folder (data.path={d.path} is read in place: a cache would only copy "
               "it); data.cache_dir keeps the shards of a copy at a URL (s3://, gs://, https://)")
    else:
        _check(not is_url(d.path), "data.path", d.path,
               f"a local folder: data={option_of('data', d._target_)} (and prepare) read local files only. For data "
               "in object storage, prepare a copy there from a local folder (`python -m app prepare ... "
               "prepare.out=<URL>`) and train with data=prepared data.path=<its URL>")
        _check(d.val_fraction is not None and 0.0 < d.val_fraction < 1.0, "data.val_fraction", d.val_fraction,
               "a fraction strictly between 0 and 1")
    _check(0.0 <= d.max_bad_fraction <= 1.0, "data.max_bad_fraction", d.max_bad_fraction,
           "a fraction from 0 to 1")
    _check(_bands_listed(d.channels), "data.channels", d.channels if isinstance(d.channels, str) else list(d.channels),
           "rgb (1, 3 or 4 bands made RGB), all (every band an image has), or band indices from 0, each once, "
           "e.g. data.channels=[3,2,1]")
    _check(d.max_image_pixels is None or d.max_image_pixels >= 1, "data.max_image_pixels", d.max_image_pixels,
           "null (no limit) or a positive number of pixels")
    if d._target_ == DATA_TARGETS["folder"]:
        _check(d.path is not None and str(d.path).strip() != "", "data.path", d.path,
               "data=folder needs the folder of images: add data.path=/path/to/images "
               "(class folders <path>/<class>/*, or <path>/train/<class>/* and <path>/val/<class>/*)")
    if d._target_ in (DATA_TARGETS["folder"], DATA_TARGETS["table"]):
        _check(0.0 <= d.test_fraction < 1.0 and d.val_fraction + d.test_fraction < 1.0, "data.test_fraction",
               d.test_fraction, f"a fraction from 0 (no test split drawn) to below 1 − data.val_fraction "
               f"({1 - d.val_fraction:g}), so training keeps images")
    if d._target_ == DATA_TARGETS["synthetic"]:
        _check_seed("data.seed", d.seed)
        _check(d.num_classes >= 2, "data.num_classes", d.num_classes, "at least 2")
        _check(d.num_images >= 2 * d.num_classes, "data.num_images", d.num_images,
               f"at least 2 images a class ({2 * d.num_classes} for {d.num_classes} classes)")
        _check(d.source_size >= 16, "data.source_size", d.source_size, "at least 16 pixels")
        _check(d.num_test_images is None or d.num_test_images >= 0, "data.num_test_images", d.num_test_images,
               "null (a quarter of num_images), 0 (no test split) or more")


def _bands_listed(channels) -> bool:
    if isinstance(channels, str):
        return channels in ("rgb", "all")
    listed = list(channels)
    return bool(listed) and len(set(listed)) == len(listed) and all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in listed)


def _check_augment(a) -> None:
    _check(a.eval_transform in EVAL_TRANSFORMS, "augment.eval_transform", a.eval_transform,
           f"one of {', '.join(EVAL_TRANSFORMS)}")
    _check(0 < a.eval_crop_fraction <= 1, "augment.eval_crop_fraction", a.eval_crop_fraction, "above 0, at most 1")


def _check_queue(q) -> None:
    for key in ("workers", "max_size"):
        value = getattr(q, key)
        _check(value == AUTO or (isinstance(value, int) and not isinstance(value, bool)), f"queue.{key}", value,
               "an integer, or auto (chosen by a short probe of the data and the model when training starts)")
    if q.worker_limit is not None:
        _check(q.worker_limit >= 1, "queue.worker_limit", q.worker_limit, "null (what the machine holds) or at least 1")
    if q.workers != AUTO:
        _check_workers(q)
    _check(q.memory_budget_mb is None or q.memory_budget_mb >= 1, "queue.memory_budget_mb", q.memory_budget_mb,
           "null (what the machine has available) or a positive number of MiB")
    _check(q.max_size == AUTO or q.max_size >= 1, "queue.max_size", q.max_size,
           "an integer of at least 1 (batches held ready), or auto")
    _check(q.timeout_s > 0, "queue.timeout_s", q.timeout_s, "a positive number of seconds")
    _check(q.startup_timeout_s > 0, "queue.startup_timeout_s", q.startup_timeout_s, "a positive number of seconds")


def _check_workers(q) -> None:
    _check(q.workers >= 0, "queue.workers", q.workers, "0 (load in the training process), more workers, or auto")
    if q.worker_limit is not None:
        _check(q.workers <= q.worker_limit, "queue.workers", q.workers, f"at most queue.worker_limit={q.worker_limit}")
    elif q.workers > 1:
        limit, why = worker_limit()
        _check(q.workers <= limit, "queue.workers", q.workers,
               f"at most {limit} on this machine ({why}); more would compete for the cores and memory. Set "
               f"queue.worker_limit={q.workers} if you know better (workers that mostly wait on network storage)")


def _check_trainer(t) -> None:
    _check(t.epochs >= 1, "trainer.epochs", t.epochs, "an integer of at least 1")
    _check(t.steps_per_epoch is None or t.steps_per_epoch >= 1, "trainer.steps_per_epoch",
           t.steps_per_epoch, "null (the whole split) or an integer of at least 1")
    _check(t.validation_steps is None or t.validation_steps >= 1, "trainer.validation_steps",
           t.validation_steps, "null (every validation sample) or an integer of at least 1")
    _check(t.overfit_batches >= 0, "trainer.overfit_batches", t.overfit_batches,
           "0 (off) or the number of training batches to train and validate on, every epoch")
    steps = list(t.profile_steps) if t.profile_steps is not None else None
    _check(steps is None or (len(steps) == 2 and 1 <= steps[0] <= steps[1]), "trainer.profile_steps", steps,
           "null, or [first, last]: global steps from 1, first ≤ last (skip the first steps: they trace the model)")
    _check(str(t.jit_compile).lower() in JIT_COMPILE, "trainer.jit_compile", t.jit_compile,
           "auto (Keras decides: XLA where there is a GPU), true or false")
    _check(t.log_every_steps >= 1, "trainer.log_every_steps", t.log_every_steps, "an integer of at least 1")
    _check(t.steps_per_execution >= 1, "trainer.steps_per_execution", t.steps_per_execution,
           "an integer of at least 1")
    _check(t.checkpoint_every_steps is None or (t.checkpoint_every_steps >= 1 and
                                                t.checkpoint_every_steps % t.steps_per_execution == 0),
           "trainer.checkpoint_every_steps", t.checkpoint_every_steps,
           f"null or a positive multiple of trainer.steps_per_execution={t.steps_per_execution} (a checkpoint "
           "falls between two calls into the compiled step)")


def _check_devices(t) -> None:
    _check(t.cpu_devices >= 1, "trainer.cpu_devices", t.cpu_devices, "an integer of at least 1")
    _check(t.cpu_devices == 1 or t.strategy != "default", "trainer.cpu_devices", t.cpu_devices,
           "1 under trainer.strategy=default (one device); logical CPU devices are for trying a strategy "
           "without GPUs: add trainer.strategy=mirrored (TensorFlow) or data_parallel (JAX)")
    _check(t.strategy != "mirrored" or t.backend == "tensorflow", "trainer.strategy", t.strategy.value,
           "mirrored is TensorFlow's tf.distribute; under trainer.backend=jax use trainer.strategy=data_parallel")
    _check(t.strategy != "data_parallel" or t.backend == "jax", "trainer.strategy", t.strategy.value,
           "data_parallel is keras.distribution, which runs on JAX only (on TensorFlow it is a stub, and "
           "multi-worker tf.distribute does not work with Keras 3: keras#20585); add trainer.backend=jax, "
           "or use trainer.strategy=mirrored for the GPUs of one host")
    hosts = {"coordinator": t.coordinator, "num_processes": t.num_processes, "process_id": t.process_id}
    given = [k for k, v in hosts.items() if v is not None]
    _check(not given or t.strategy == "data_parallel", f"trainer.{given[0] if given else 'coordinator'}",
           hosts[given[0]] if given else None, "only with trainer.strategy=data_parallel (several processes)")
    _check(len(given) in (0, 3), "trainer.coordinator", t.coordinator, "given with trainer.num_processes and "
           "trainer.process_id (all three, or none: one process, or what SLURM's variables say)")
    if len(given) == 3:
        _check(t.num_processes >= 1 and 0 <= t.process_id < t.num_processes, "trainer.process_id", t.process_id,
               f"from 0 to trainer.num_processes - 1 = {t.num_processes - 1}")
        _check(":" in t.coordinator, "trainer.coordinator", t.coordinator, "host:port of process 0")


def _check_recipe(cfg) -> None:
    o, s, epochs = cfg.optimizer, cfg.scheduler, cfg.trainer.epochs
    _check(o.learning_rate > 0, "optimizer.learning_rate", o.learning_rate, "a positive (peak) learning rate")
    for key in ("weight_decay", "clipnorm", "global_clipnorm"):
        value = o[key]
        _check(value is None or value >= 0, f"optimizer.{key}", value, "null (Keras's default) or a number ≥ 0")
    _check(o.clipnorm is None or o.global_clipnorm is None, "optimizer.global_clipnorm", o.global_clipnorm,
           "null when optimizer.clipnorm is set (one of the two)")
    _check(0 < o.ema_momentum < 1, "optimizer.ema_momentum", o.ema_momentum, "strictly between 0 and 1")
    target = cfg.scheduler._target_
    _check(target in SCHEDULER_TARGETS.values(), "scheduler._target_", target,
           f"one of {', '.join(SCHEDULER_TARGETS.values())}: choose it with scheduler=<{'|'.join(SCHEDULER_TARGETS)}>")
    for option, node in cfg.logger.items():  # each chosen logger's node builds that logger's writer
        _check(node is None or node._target_ == LOGGER_TARGETS[option], f"logger.{option}._target_",
               node and node._target_, f"{LOGGER_TARGETS[option]}: choose loggers with logger=[tensorboard,mlflow]")
    _check(0 <= s.warmup_epochs < epochs, "scheduler.warmup_epochs", s.warmup_epochs,
           f"from 0 to below trainer.epochs={epochs}")
    _check(0 <= s.final_fraction <= 1, "scheduler.final_fraction", s.final_fraction, "a fraction of the peak, 0 to 1")
    _check(0 < s.start_fraction <= 1, "scheduler.start_fraction", s.start_fraction, "a fraction of the peak, above 0")
    _check(0 < s.peak_at < 1, "scheduler.peak_at", s.peak_at, "a fraction of the run, strictly between 0 and 1")
    _check(s.every_epochs >= 1, "scheduler.every_epochs", s.every_epochs, "an integer of at least 1")
    _check(s.gamma > 0, "scheduler.gamma", s.gamma, "a positive factor")
    milestones = list(s.milestones)
    _check(milestones == sorted(set(milestones)) and all(0 < m < epochs for m in milestones), "scheduler.milestones",
           milestones, f"increasing epochs between 0 and trainer.epochs={epochs}")
    t = cfg.trainer
    _check(t.grad_accum_steps >= 1, "trainer.grad_accum_steps", t.grad_accum_steps, "an integer of at least 1")
    _check(0 <= t.label_smoothing < 1, "trainer.label_smoothing", t.label_smoothing, "from 0 to below 1")
    weights = t.class_weight
    _check(weights in (None, "balanced") or (isinstance(weights, (dict, DictConfig)) and all(
        isinstance(v, (int, float)) and v >= 0 for v in weights.values())), "trainer.class_weight", weights,
        "null, balanced, or a mapping {class name: weight ≥ 0}")
    _check(t.top_k in (None, AUTO) or (isinstance(t.top_k, int) and not isinstance(t.top_k, bool) and t.top_k >= 2),
           "trainer.top_k", t.top_k, "auto (5), null or an integer of at least 2")
    _check(t.monitor_mode in ("auto", "max", "min"), "trainer.monitor_mode", t.monitor_mode, "auto, max or min")
    for i, spec in enumerate(cfg.trainer.callbacks):
        plateau = str((spec or {}).get("_target_", "")).endswith("ReduceLROnPlateau")
        option = option_of("scheduler", s._target_) or s._target_
        _check(not (plateau and option != "constant"), f"trainer.callbacks[{i}]", spec.get("_target_"),
               f"ReduceLROnPlateau cannot change the learning rate scheduler={option} sets: use it with "
               "scheduler=constant, or drop it")


def _check_model(cfg) -> None:
    m, size = cfg.model, list(cfg.data.image_size)
    if "widths" in m:  # model=resnet
        widths = list(m.widths)
        _check(len(widths) >= 1 and all(w >= 1 for w in widths), "model.widths", widths,
               "a non-empty list of positive channel counts")
        _check(m.blocks_per_stage >= 1, "model.blocks_per_stage", m.blocks_per_stage, "an integer of at least 1")
    if "dropout" in m:
        _check(0.0 <= m.dropout < 1.0, "model.dropout", m.dropout, "a rate from 0 to below 1")
    if "name" in m:  # model=keras_app
        _check_keras_app(m, size)
    t = cfg.trainer
    if t.unfreeze_at_epoch is not None:
        _check(bool(m.get("freeze_backbone")), "trainer.unfreeze_at_epoch", t.unfreeze_at_epoch,
               "only with a frozen backbone to unfreeze: model=keras_app model.freeze_backbone=true")
        _check(t.unfreeze_at_epoch >= 2, "trainer.unfreeze_at_epoch", t.unfreeze_at_epoch,
               "the first epoch (2 or later) that trains the backbone too; the epochs before train the head alone")


def _check_bench_and_preview(cfg) -> None:
    """The groups only the configs of bench, preview and prepare hold (conf/bench.yaml, preview.yaml, prepare.yaml)."""
    if "bench" in cfg:
        b = cfg.bench
        _check(len(b.modes) > 0 and all(m in BENCH_MODES for m in b.modes), "bench.modes", list(b.modes),
               f"a list of modes from {', '.join(BENCH_MODES)}")
        _check(b.batches >= 1, "bench.batches", b.batches, "at least 1 timed batch")
        _check(b.warmup >= 0, "bench.warmup", b.warmup, "0 or more batches")
    if "preview" in cfg:
        _check(cfg.preview.images >= 1, "preview.images", cfg.preview.images, "at least 1 sample")
        _check(cfg.preview.augmentations >= 1, "preview.augmentations", cfg.preview.augmentations, "at least 1")
    if "prepare" in cfg:
        _check_prepare(cfg.prepare)
        check_patch_draws(cfg.prepare.patch_draws, cfg.data)


def _check_prepare(p) -> None:
    side = p.short_side
    _check(side in ("auto", "full") or (isinstance(side, int) and not isinstance(side, bool) and side >= 1),
           "prepare.short_side", side, "auto (what the train and eval transforms need), full, or an integer ≥ 1")
    _check(p.format in ("jpeg", "raw"), "prepare.format", p.format, "jpeg or raw")
    _check(1 <= p.quality <= 100, "prepare.quality", p.quality, "an integer from 1 to 100 (95: the default)")
    _check(p.shard_mb >= 1, "prepare.shard_mb", p.shard_mb, "at least 1 (MiB a shard)")


def _check_keras_app(m, size: list[int]) -> None:
    _check(m.name in FAMILIES, "model.name", m.name,
           f"one of the keras.applications classifiers: {', '.join(FAMILIES)}")
    least = FAMILIES[m.name].min_size
    _check(min(size) >= least, "data.image_size", size,
           f"at least {least}×{least} for model.name={m.name} (Keras refuses smaller inputs to it)")
    _check(m.pooling in ("avg", "max"), "model.pooling", m.pooling, "avg or max (global pooling of the last features)")
    weights = m.weights
    _check(weights in (None, "imagenet") or Path(str(weights)).expanduser().is_file(), "model.weights", weights,
           "null (random), imagenet (downloaded once into $KERAS_HOME/models), or the path of a weights file; "
           "no file is there")
