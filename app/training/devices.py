"""Where the steps run and in which precision: `trainer.strategy`, `trainer.cpu_devices` and
`trainer.precision`.

- default: one device, the first GPU when there is one (TensorFlow places there by itself), else
  the CPU.
- mirrored: `tf.distribute.MirroredStrategy` over every local GPU, or, with none, over
  `trainer.cpu_devices` logical CPU devices (anyone can try it). The global batch
  (`data.batch_size`) is split across the replicas by tf.data (app/training/steps.py), so it
  must divide evenly; validation's short last batch is split unevenly, which Keras handles.
  Model, optimizer and metrics are built inside the strategy's scope (the trainer runs in it).
- precision: Keras's global dtype policy; the first layer and the softmax head stay float32
  (app/model.py), and Keras wraps the optimizer in a LossScaleOptimizer under mixed_float16.

The logical CPU devices must be set before TensorFlow initialises its runtime, once a process:
a sweep over `trainer.cpu_devices` needs a launcher that starts a process a job (joblib).
Never imports the loader.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

from app.config import config_error
from app.frameworks import native_stderr_to_log
from app.schema import Config

log = logging.getLogger("app.train")


@dataclass
class Placement:
    """The devices a run trains on."""

    strategy_name: str
    devices: list[str] = field(default_factory=list)  # the replicas' devices (mirrored), or the one device
    gpus: list[str] = field(default_factory=list)  # every GPU TensorFlow sees
    strategy: object = None  # the tf.distribute strategy; None: one device

    @property
    def replicas(self) -> int:
        return len(self.devices) if self.strategy is not None else 1

    def scope(self):
        """Where the model, its optimizer and metrics are built and the steps run."""
        return self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()

    def record(self) -> dict:
        """What summary.json keeps of it."""
        return {"strategy": self.strategy_name, "replicas": self.replicas, "devices": self.devices}


def place(config: Config) -> Placement:
    """The devices `config.trainer` asks for, the batch checked against them. Call before anything
    runs a TensorFlow op (the logical CPU devices are fixed once TensorFlow starts)."""
    import tensorflow as tf

    trainer = config.trainer
    logging.getLogger("tensorflow").setLevel(logging.WARNING)  # a strategy logs each all-reduce at INFO
    if trainer.cpu_devices > 1:
        _split_cpu(tf, trainer.cpu_devices)
    with native_stderr_to_log():  # cuInit's "no GPU" line, when there is none
        gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    if trainer.strategy == "default":
        placement = Placement("default", [gpus[0] if gpus else "/device:CPU:0"], gpus)
    else:
        devices = gpus or [d.name for d in tf.config.list_logical_devices("CPU")]
        placement = Placement("mirrored", devices, gpus, tf.distribute.MirroredStrategy(devices))
        _check_batch(config.data.batch_size, placement)
    log.info("devices: %s; trainer.strategy=%s over %d replica%s: %s", ", ".join(gpus) if gpus else
             "CPU only (no GPU visible to TensorFlow)", placement.strategy_name, placement.replicas,
             "" if placement.replicas == 1 else "s", ", ".join(placement.devices))
    return placement


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


def set_precision(config: Config) -> None:
    """Keras's global dtype policy for the layers built from here on."""
    import keras

    keras.mixed_precision.set_global_policy(str(config.trainer.precision.value))
