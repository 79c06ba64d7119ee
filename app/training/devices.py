"""Where steps run and in which precision: default, the first GPU else CPU; mirrored (TF), MirroredStrategy over local
GPUs else `trainer.cpu_devices` CPUs; data_parallel (JAX), every process's devices. The batch splits evenly."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from dataclasses import dataclass, field

import numpy as np

from app.errors import config_error
from app.frameworks import load_tensorflow, native_stderr_to_log
from app.schema import Config, TrainerConfig

log = logging.getLogger("app.train")
# XLA's GPU allocator (BFC) keeps an 8-byte handle in host memory for every 256 bytes of its pool, which JAX
# preallocates (75 % of each GPU's memory): 3.3 GiB of host memory beside an H200 (docs/performance.md).
BFC_HOST_BYTES_PER_POOL_BYTE = 8 / 256


@dataclass(kw_only=True)
class Placement:
    strategy_name: str
    devices: list[str] = field(default_factory=list)  # the replicas' devices (mirrored), or the one device
    gpus: list[str] = field(default_factory=list)  # every accelerator the backend sees: GPUs (JAX: or TPUs)
    strategy: object = None  # the tf.distribute strategy; None: one device, or JAX's distribution (global)
    processes: int = 1  # data_parallel over several processes: how many, and which this one is
    process: int = 0
    local_devices: int = 1  # the devices of this process

    @property
    def replicas(self) -> int:
        return len(self.devices)

    @property
    def writes(self) -> bool:
        """Whether this process writes the run directory (process 0 of several, or the one)."""
        return self.process == 0

    def scope(self):
        """Where the model, its optimizer and metrics are built and the steps run."""
        return self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()

    def record(self) -> dict:
        """What summary.json keeps of it."""
        return {"strategy": self.strategy_name, "replicas": self.replicas, "devices": self.devices,
                **({"processes": self.processes} if self.processes > 1 else {})}


def place(config: Config) -> Placement:
    """The devices `config.trainer` asks for, the batch checked against them; call before any TensorFlow op."""
    if config.trainer.backend == "jax":
        return _place_jax(config)
    import tensorflow as tf

    trainer = config.trainer
    logging.getLogger("tensorflow").setLevel(logging.WARNING)  # a strategy logs each all-reduce at INFO
    if trainer.cpu_devices > 1:
        _split_cpu(tf, trainer.cpu_devices)
    with native_stderr_to_log():  # cuInit's "no GPU" line, when there is none
        gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    if trainer.strategy == "default":
        placement = Placement(strategy_name="default", devices=[gpus[0] if gpus else "/device:CPU:0"], gpus=gpus)
    else:
        devices = gpus or [d.name for d in tf.config.list_logical_devices("CPU")]
        placement = Placement(strategy_name="mirrored", devices=devices, gpus=gpus,
                              strategy=tf.distribute.MirroredStrategy(devices))
        _check_batch(config.data.batch_size, placement)
    _log(placement, "TensorFlow")
    return placement


def _place_jax(config: Config) -> Placement:
    import jax
    import keras

    load_tensorflow_beside_jax()
    trainer = config.trainer
    logging.getLogger("jax").setLevel(logging.WARNING)  # its INFO lines: each platform it did not find
    with native_stderr_to_log():  # XLA's "no GPU" lines, when there is none
        if trainer.strategy == "data_parallel" and several_processes(trainer):
            keras.distribution.initialize(trainer.coordinator, trainer.num_processes, trainer.process_id)
        gpus = [str(d) for d in jax.devices() if d.platform in ("gpu", "tpu")]  # the accelerators
    if not gpus and trainer.cpu_devices > 1 and jax.local_device_count() != trainer.cpu_devices:
        raise config_error("trainer.cpu_devices", trainer.cpu_devices, f"JAX started in this process before the "
                           f"setting was made, with {jax.local_device_count()} CPU device(s); sweep over "
                           "trainer.cpu_devices with a launcher that starts a process a job (hydra/launcher=joblib)")
    if trainer.strategy == "default":
        placement = Placement(strategy_name="default", devices=[str(jax.devices()[0])], gpus=gpus)
    else:
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
        placement = Placement(strategy_name="data_parallel", devices=[str(d) for d in jax.devices()], gpus=gpus,
                              processes=jax.process_count(), process=jax.process_index(),
                              local_devices=jax.local_device_count())
        _check_batch(config.data.batch_size, placement)
    _log(placement, "JAX")
    return placement


class JaxPut:
    """A batch as resident JAX arrays, this process's rows over the distribution's devices (`whole_last`: every one)."""
    # the distribution is taken in the step's thread: Keras keeps one a thread (app/training/feed.py puts in another)

    def __init__(self, distribution, *, count: int, whole_last: bool):
        self.distribution, self.count, self.whole_last, self.done = distribution, count, whole_last, 0

    def __call__(self, batch: tuple) -> tuple:
        import jax  # the JAX backend's: loaded already

        whole = self.whole_last and self.done == self.count - 1
        self.done += 1
        if self.distribution is None:
            return jax.block_until_ready(tuple(jax.device_put(a) for a in batch))
        return jax.block_until_ready(tuple(jax.make_array_from_process_local_data(self._layout(a, whole), a)
                                           for a in batch))

    def _layout(self, a, whole: bool):
        import keras  # the run's, loaded already; this module is imported before the backend is chosen

        if whole:
            return keras.distribution.TensorLayout([None] * a.ndim, self.distribution.device_mesh).backend_layout
        return self.distribution.get_data_layout(a.shape).backend_layout


def tensorflow_device(tf) -> str:  # where TensorFlow's default strategy steps: its first GPU, else the CPU
    gpus = tf.config.list_logical_devices("GPU")
    return gpus[0].name if gpus else "/device:CPU:0"


def on_tensorflow_device(device: str, batch: tuple) -> tuple:
    import tensorflow as tf  # the TensorFlow backend's: loaded already

    with tf.device(device):  # eager: a copy from pageable host memory returns once its bytes are staged
        return tuple(tf.identity(a) for a in batch)


def allocator_host_mib(trainer: TrainerConfig) -> float:
    """Host MiB of the GPU allocator's bookkeeping: JAX's preallocated pools / 32; else 0 (TensorFlow: not measured)."""
    if trainer.backend != "jax" or os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() in ("false", "0") \
            or os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "").lower() == "platform":
        return 0.0
    import jax  # started by the placement already; a module-level import would load it under TensorFlow

    pools = [(d.memory_stats() or {}).get("bytes_limit", 0) for d in jax.local_devices() if d.platform == "gpu"]
    return sum(pools) * BFC_HOST_BYTES_PER_POOL_BYTE / 2**20


def load_tensorflow_beside_jax() -> None:
    """TensorFlow, where installed, loaded quietly and off the GPUs (Keras on JAX may import it)."""
    if importlib.util.find_spec("tensorflow"):
        load_tensorflow()


def expected_process(trainer) -> int:
    """This process's id in a several-process data_parallel run, from config or SLURM before JAX starts; else 0."""
    if trainer.strategy != "data_parallel" or not several_processes(trainer):
        return 0
    return trainer.process_id if trainer.process_id is not None else int(os.environ.get("SLURM_PROCID", "0"))


def check_one_run_dir(run_dir) -> None:
    """A ConfigError unless every process of a several-process run writes into process 0's run directory."""
    from jax.experimental import multihost_utils

    mine = str(run_dir.resolve()).encode()[:4096]
    ours = np.frombuffer(mine.ljust(4096, b"\0"), np.uint8)
    first = bytes(np.asarray(multihost_utils.broadcast_one_to_all(ours))).rstrip(b"\0")
    if first != mine:
        raise config_error("hydra.run.dir", str(run_dir), f"process 0 of this run writes {first.decode()}; every "
                           "process must write the same run directory: give each the same hydra.run.dir=... "
                           "(Hydra's submitit launcher and srun under SLURM do so by themselves)")


def several_processes(trainer) -> bool:
    """Whether a data_parallel run spans processes: trainer.num_processes, or SLURM's task count."""
    return (trainer.num_processes or int(os.environ.get("SLURM_NTASKS", "1"))) > 1


def _log(placement: Placement, backend: str) -> None:
    n = placement.replicas
    log.info("devices: %s; trainer.strategy=%s over %d device%s%s: %s",
             ", ".join(placement.gpus) if placement.gpus else f"CPU only (no GPU visible to {backend})",
             placement.strategy_name, n, "" if n == 1 else "s",
             f" of {placement.processes} processes (this is process {placement.process})"
             if placement.processes > 1 else "", ", ".join(placement.devices))


def _split_cpu(tf, n: int) -> None:
    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == n:
        return
    try:
        tf.config.set_logical_device_configuration(cpu, wanted)
    except RuntimeError:  # TensorFlow started already in this process (an earlier job of a sweep)
        raise config_error("trainer.cpu_devices", n, f"TensorFlow already runs in this process with "
                           f"{len(current or [cpu])} CPU device(s), and they are fixed once it starts; sweep "
                           "over trainer.cpu_devices with a launcher that starts a process a job "
                           "(hydra/launcher=joblib)") from None


def _check_batch(batch: int, placement: Placement) -> None:
    n = placement.replicas
    if batch % n:
        lower, upper = batch // n * n, (batch // n + 1) * n
        raise config_error("data.batch_size", batch, f"the global batch is split across the {n} replicas of "
                           f"trainer.strategy={placement.strategy_name} ({', '.join(placement.devices)}) and "
                           f"must divide evenly: use data.batch_size={upper}"
                           + (f" or {lower}" if lower else ""))


def set_precision(trainer: TrainerConfig) -> None:
    """Keras's global dtype policy for the layers built from here on."""
    import keras

    keras.mixed_precision.set_global_policy(str(trainer.precision.value))
