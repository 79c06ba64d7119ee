"""The schemas of the training side's groups: model (one a builder), optimizer, scheduler, logger, trainer."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING


class Backend(str, Enum):
    auto = "auto"  # TensorFlow where it is installed, else JAX: resolved once, when the config is validated
    tensorflow = "tensorflow"
    jax = "jax"


class Strategy(str, Enum):
    default = "default"  # one device: the GPU when there is one, else the CPU
    mirrored = "mirrored"  # TensorFlow: every local GPU (or trainer.cpu_devices CPUs), the batch split across them
    data_parallel = "data_parallel"  # JAX: every device of every process, the batch split across them


class Precision(str, Enum):
    float32 = "float32"
    mixed_float16 = "mixed_float16"  # GPUs with float16 units; the loss is scaled
    mixed_bfloat16 = "mixed_bfloat16"  # recent GPUs, TPUs and CPUs with bfloat16


@dataclass
class ModelConfig:
    """What every model schema has: the builder, by `_target_` (model_schema picks the schema by it)."""

    _target_: str = MISSING


@dataclass(kw_only=True)
class ResnetModelConfig(ModelConfig):
    """model=resnet: the small ResNet of app/model.py."""

    _target_: str = "app.model.small_resnet"
    widths: list[int] = field(default_factory=lambda: [32, 64, 128])
    blocks_per_stage: int = 1
    dropout: float = 0.2
    kwargs: dict[str, Any] = field(default_factory=dict)  # more keyword arguments for the builder


@dataclass(kw_only=True)
class KerasAppConfig(ModelConfig):
    """model=keras_app: a keras.applications backbone with a new head (app/backbones.py)."""

    _target_: str = "app.backbones.keras_app"
    name: str = "MobileNetV3Small"  # a keras.applications classifier (app/families.py)
    weights: str | None = None  # null (random), imagenet (downloaded once), or a weights file's path
    pooling: str = "avg"  # avg or max, after the last feature map
    dropout: float = 0.2
    freeze_backbone: bool = False  # train the head alone (until trainer.unfreeze_at_epoch)
    kwargs: dict[str, Any] = field(default_factory=dict)  # more arguments for the application (alpha, ...)


@dataclass
class CustomModelConfig(ModelConfig):
    """model=custom: any builder `(input_shape, num_classes, **kwargs) -> keras.Model`, its input RGB in [0, 1]."""

    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class OptimizerConfig:
    """conf/optimizer: any Keras optimizer by `_target_`; `learning_rate` is the peak conf/scheduler shapes."""

    _target_: str = "keras.optimizers.Adam"
    learning_rate: float = 0.001
    weight_decay: float | None = None  # decoupled (AdamW, Lion, SGD: Keras's weight_decay)
    clipnorm: float | None = None  # each gradient's norm at most this
    global_clipnorm: float | None = None  # the norm of all gradients together at most this
    use_ema: bool = False  # keep an exponential moving average of the weights
    ema_momentum: float = 0.99
    kwargs: dict[str, Any] = field(default_factory=dict)  # the optimizer's own (momentum, beta_1, ...)


# What each scheduler and logger option builds, its node's `_target_` (set by `scheduler=<option>`,
# `logger=<option>`), as model's and optimizer's name theirs: every group chooses the same way.
SCHEDULER_TARGETS = {name: f"app.training.schedules.{name}" for name in
                     ("constant", "cosine", "step", "multistep", "one_cycle")}
LOGGER_TARGETS = {"tensorboard": "app.tracking.dashboards.TensorBoardWriter",
                  "csv": "app.tracking.dashboards.CsvWriter", "mlflow": "app.tracking.mlflow_writer.MlflowWriter",
                  "none": "app.tracking.dashboards.Writer"}


@dataclass(kw_only=True)
class SchedulerConfig:
    """conf/scheduler: the learning rate over the run, in steps (epochs × steps an epoch)."""

    _target_: str = SCHEDULER_TARGETS["constant"]  # the schedule's builder in app/training/schedules.py
    warmup_epochs: float = 0.0  # cosine: a linear warm-up from 0 to the peak first
    final_fraction: float = 0.0  # cosine, one_cycle: the last learning rate, as a fraction of the peak
    every_epochs: int = 1  # step: the rate times `gamma` every this many epochs
    milestones: list[int] = field(default_factory=list)  # multistep: the epochs after which it is times `gamma`
    gamma: float = 0.1
    start_fraction: float = 0.04  # one_cycle: the first learning rate, as a fraction of the peak
    peak_at: float = 0.3  # one_cycle: where in the run the peak is, as a fraction of it


@dataclass
class TensorBoardLoggerConfig:
    """conf/logger/tensorboard.yaml: event files in <run dir>/tensorboard."""

    _target_: str = LOGGER_TARGETS["tensorboard"]  # the writer in app/tracking/dashboards.py


@dataclass
class CsvLoggerConfig:
    """conf/logger/csv.yaml: <run dir>/scalars.csv."""

    _target_: str = LOGGER_TARGETS["csv"]


@dataclass(kw_only=True)
class MlflowLoggerConfig:
    """conf/logger/mlflow.yaml: an MLflow run (app/tracking/mlflow_writer.py)."""

    _target_: str = LOGGER_TARGETS["mlflow"]
    # null: MLFLOW_TRACKING_URI when set, else sqlite:///<absolute outputs/>/mlflow.db, shared by every run
    tracking_uri: str | None = None
    # null: the sweep's folder for a sweep's jobs (one experiment a sweep), else `train`
    experiment: str | None = None


@dataclass
class LoggerConfig:
    """conf/logger: the run's dashboards, one node an option (`logger=[tensorboard,mlflow]`; none: `logger=none`)."""

    tensorboard: TensorBoardLoggerConfig | None = None
    csv: CsvLoggerConfig | None = None
    mlflow: MlflowLoggerConfig | None = None


@dataclass(kw_only=True)
class TrainerConfig:
    epochs: int = 8
    steps_per_epoch: int | None = None
    validation_steps: int | None = None  # null: every validation sample; N: N batches of every class (debug)
    # N: train and validate on the same N batches every epoch (debug=overfit: does the model learn at all?)
    overfit_batches: int = 0
    # [first, last]: TensorBoard's profiler traces these global steps into <run dir>/tensorboard (debug=profile)
    profile_steps: list[int] | None = None
    checkpoint_every_steps: int | None = None  # a multiple of steps_per_execution
    unfreeze_at_epoch: int | None = None  # with model.freeze_backbone: the first epoch that trains the backbone
    grad_accum_steps: int = 1  # steps whose gradients are averaged into one update (small batches of large images)
    label_smoothing: float = 0.0
    loss: str = "crossentropy"  # data.task=segmentation: also dice, or crossentropy+dice (their sum)
    threshold: float = 0.5  # data.task=multilabel: the probability from which a class is predicted
    class_weight: Any = None  # null, balanced (from the training split's labels), or {class name: weight}
    # also top-k accuracy (when k is below the class count); auto: 5 with one class an image, none with several
    top_k: Any = "auto"
    per_class_recall: bool = True  # also the recall of each class: recall_<class>
    monitor: str = "auto"  # picks the best checkpoint and model.keras; auto: val_accuracy (several labels: val_auc)
    monitor_mode: str = "auto"  # max, min, or auto: min for a loss, max otherwise
    # one cadence for the progress bar, the logger and reading metrics off the device
    log_every_steps: int = 10
    steps_per_execution: int = 1  # training steps a call into the compiled function (Keras's compile)
    precision: Precision = Precision.float32  # Keras's dtype policy; the head and the first layer stay float32
    jit_compile: str = "auto"  # auto | true | false (a YAML boolean arrives as "True"/"False")
    # More Keras callbacks, each a mapping with `_target_` (e.g. keras.callbacks.EarlyStopping)
    callbacks: list[Any] = field(default_factory=list)
    deterministic: bool = False  # TensorFlow op determinism: exact repeats and resumes (slower on GPUs)
    record_samples: bool = False  # samples.csv: the sample indices of every step
    backend: Backend = Backend.auto  # Keras's backend (KERAS_BACKEND), set before Keras loads
    strategy: Strategy = Strategy.default
    # N > 1: the CPU as N logical devices, so a strategy can be tried without GPUs
    cpu_devices: int = 1
    # data_parallel over several processes (JAX): process 0's host:port, the process count and this
    # process's id; null: one process, or what SLURM's variables say (srun, Hydra's submitit launcher)
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
