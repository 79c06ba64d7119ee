"""The trainer group's rules (steps, devices, figures), and its words `jit_compile` and `top_k=auto`, read once."""

from __future__ import annotations

from omegaconf import DictConfig

from app.rules.common import AUTO, require

JIT_COMPILE = {"auto": "auto", "true": True, "false": False}  # trainer.jit_compile → Keras's compile argument

TOP_K = 5  # trainer.top_k=auto's k, with one class an image


def top_k(trainer, classes: int) -> int | None:
    """The k of the top-k accuracy (trainer.top_k, auto: 5); None where there are k classes or fewer, or none asked."""
    k = TOP_K if trainer.top_k == AUTO else trainer.top_k
    return k if k and k < classes else None


def check(trainer) -> None:
    _check_steps(trainer)
    _check_devices(trainer)
    _check_figures(trainer)


def _check_steps(t) -> None:
    require(t.epochs >= 1, "trainer.epochs", t.epochs, "an integer of at least 1")
    require(t.steps_per_epoch is None or t.steps_per_epoch >= 1, "trainer.steps_per_epoch",
            t.steps_per_epoch, "null (the whole split) or an integer of at least 1")
    require(t.validation_steps is None or t.validation_steps >= 1, "trainer.validation_steps",
            t.validation_steps, "null (every validation sample) or an integer of at least 1")
    require(t.overfit_batches >= 0, "trainer.overfit_batches", t.overfit_batches,
            "0 (off) or the number of training batches to train and validate on, every epoch")
    steps = list(t.profile_steps) if t.profile_steps is not None else None
    require(steps is None or (len(steps) == 2 and 1 <= steps[0] <= steps[1]), "trainer.profile_steps", steps,
            "null, or [first, last]: global steps from 1, first ≤ last (skip the first steps: they trace the model)")
    require(str(t.jit_compile).lower() in JIT_COMPILE, "trainer.jit_compile", t.jit_compile,
            "auto (Keras decides: XLA where there is a GPU), true or false")
    require(t.log_every_steps >= 1, "trainer.log_every_steps", t.log_every_steps, "an integer of at least 1")
    require(t.steps_per_execution >= 1, "trainer.steps_per_execution", t.steps_per_execution,
            "an integer of at least 1")
    require(t.checkpoint_every_steps is None or (t.checkpoint_every_steps >= 1 and
                                                 t.checkpoint_every_steps % t.steps_per_execution == 0),
            "trainer.checkpoint_every_steps", t.checkpoint_every_steps,
            f"null or a positive multiple of trainer.steps_per_execution={t.steps_per_execution} (a checkpoint "
            "falls between two calls into the compiled step)")


def _check_devices(t) -> None:
    require(t.cpu_devices >= 1, "trainer.cpu_devices", t.cpu_devices, "an integer of at least 1")
    require(t.cpu_devices == 1 or t.strategy != "default", "trainer.cpu_devices", t.cpu_devices,
            "1 under trainer.strategy=default (one device); logical CPU devices are for trying a strategy "
            "without GPUs: add trainer.strategy=mirrored (TensorFlow) or data_parallel (JAX)")
    require(t.strategy != "mirrored" or t.backend == "tensorflow", "trainer.strategy", t.strategy.value,
            "mirrored is TensorFlow's tf.distribute; under trainer.backend=jax use trainer.strategy=data_parallel")
    require(t.strategy != "data_parallel" or t.backend == "jax", "trainer.strategy", t.strategy.value,
            "data_parallel is keras.distribution, which runs on JAX only (on TensorFlow it is a stub, and "
            "multi-worker tf.distribute does not work with Keras 3: keras#20585); add trainer.backend=jax, "
            "or use trainer.strategy=mirrored for the GPUs of one host")
    hosts = {"coordinator": t.coordinator, "num_processes": t.num_processes, "process_id": t.process_id}
    given = [k for k, v in hosts.items() if v is not None]
    require(not given or t.strategy == "data_parallel", f"trainer.{given[0] if given else 'coordinator'}",
            hosts[given[0]] if given else None, "only with trainer.strategy=data_parallel (several processes)")
    require(len(given) in (0, 3), "trainer.coordinator", t.coordinator, "given with trainer.num_processes and "
            "trainer.process_id (all three, or none: one process, or what SLURM's variables say)")
    if len(given) == 3:
        require(t.num_processes >= 1 and 0 <= t.process_id < t.num_processes, "trainer.process_id", t.process_id,
                f"from 0 to trainer.num_processes - 1 = {t.num_processes - 1}")
        require(":" in t.coordinator, "trainer.coordinator", t.coordinator, "host:port of process 0")


def _check_figures(t) -> None:
    # what the recipe takes of the trainer: its updates, its loss's smoothing and weights, what it reports
    require(t.grad_accum_steps >= 1, "trainer.grad_accum_steps", t.grad_accum_steps, "an integer of at least 1")
    require(0 <= t.label_smoothing < 1, "trainer.label_smoothing", t.label_smoothing, "from 0 to below 1")
    weights = t.class_weight
    require(weights in (None, "balanced") or (isinstance(weights, (dict, DictConfig)) and all(
        isinstance(v, (int, float)) and v >= 0 for v in weights.values())), "trainer.class_weight", weights,
        "null, balanced, or a mapping {class name: weight ≥ 0}")
    require(t.top_k in (None, AUTO) or (isinstance(t.top_k, int) and not isinstance(t.top_k, bool) and t.top_k >= 2),
            "trainer.top_k", t.top_k, "auto (5), null or an integer of at least 2")
    require(t.monitor_mode in ("auto", "max", "min"), "trainer.monitor_mode", t.monitor_mode, "auto, max or min")
