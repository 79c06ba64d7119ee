"""The config's schema: one dataclass a config group, registered in Hydra's ConfigStore.

OmegaConf enforces these types, enum values and unknown keys while Hydra composes, and again
(app/config.py's `typed`) on any config read back from a run; after `config.load` the
dataclasses themselves are the object every stage reads. The YAML files in conf/ extend them
(`defaults: [<group>_schema, _self_]`), and their defaults are these (tests/test_schema.py).
Ranges and cross-key rules are app/config.py's. Imports nothing of the app but the standard
library, Hydra and OmegaConf: worker processes import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# OmegaConf matches enum members by name, and `raise` is a keyword: hence the functional form.
OnBadSample = Enum("OnBadSample", {"raise": "raise", "skip": "skip"}, type=str)  # type: ignore[misc]


class StartMethod(str, Enum):
    spawn = "spawn"
    forkserver = "forkserver"


class Backend(str, Enum):
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
class DecodeConfig:
    draft: bool = True  # JPEG: decode at 1/2, 1/4 or 1/8 scale when the network input allows


@dataclass
class DataConfig:
    name: str = MISSING  # synthetic | cifar | folder, set by each conf/data file
    path: str | None = None
    image_size: list[int] = field(default_factory=lambda: [64, 64])
    batch_size: int = 32
    val_fraction: float = 0.2
    on_bad_sample: OnBadSample = OnBadSample["raise"]  # type: ignore[valid-type]
    max_bad_fraction: float = 0.01
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    # An image declaring more pixels is a bad sample, refused before any decode (a decompression
    # bomb: a few hundred bytes can declare 30000×30000). Pillow's own limit; null: none.
    max_image_pixels: int | None = 89_478_485


@dataclass
class SyntheticDataConfig(DataConfig):
    name: str = "synthetic"
    path: str | None = "datasets/synthetic"
    num_images: int = 800
    source_size: int = 1024
    num_classes: int = 4
    seed: int = 0
    num_test_images: int | None = None  # the test split, generated apart: null is a quarter of num_images


@dataclass
class CifarDataConfig(DataConfig):
    name: str = "cifar"
    path: str | None = "datasets/cifar10"
    image_size: list[int] = field(default_factory=lambda: [32, 32])
    batch_size: int = 64
    val_fraction: float = 0.1  # of each class of the training batches; the test batch is the test split
    download: bool = False


@dataclass
class FolderDataConfig(DataConfig):
    name: str = "folder"
    image_size: list[int] = field(default_factory=lambda: [128, 128])
    # the test split: <path>/test/<class>/ when it is there, else this folder of <class>/ (null: none)
    test_path: str | None = None
    test_fraction: float = 0.0  # or, in the flat layout <path>/<class>/, this fraction of each class


@dataclass
class AugmentConfig:
    # albumentations transforms, one `_target_` mapping an entry; a resize to
    # data.image_size is appended. Validation images get that resize only.
    transforms: list[Any] = field(default_factory=list)
    # validation, evaluate and predict: resize (the whole image), or center_crop (the short side
    # scaled to the input size over eval_crop_fraction, then the centre cropped to the input size)
    eval_transform: str = "resize"
    eval_crop_fraction: float = 0.875


@dataclass
class QueueConfig:
    workers: int = 2
    use_multiprocessing: bool = True
    max_size: int = 2
    shuffle: bool = True
    start_method: StartMethod = StartMethod.spawn
    timeout_s: float = 120.0  # for one batch, once the workers have started
    startup_timeout_s: float = 300.0  # for a worker process to start (imports, data source) before its first task
    # null: at most what the machine can hold (worker_limit()); a number replaces that limit
    worker_limit: int | None = None


@dataclass
class ResnetModelConfig:
    """model=resnet: the small ResNet of app/model.py."""

    _target_: str = "app.model.small_resnet"
    widths: list[int] = field(default_factory=lambda: [32, 64, 128])
    blocks_per_stage: int = 1
    dropout: float = 0.2
    kwargs: dict[str, Any] = field(default_factory=dict)  # more keyword arguments for the builder


@dataclass
class KerasAppConfig:
    """model=keras_app: a keras.applications backbone with a new head (app/backbones.py)."""

    _target_: str = "app.backbones.keras_app"
    name: str = "MobileNetV3Small"  # a keras.applications classifier (app/families.py)
    weights: str | None = None  # null (random), imagenet (downloaded once), or a weights file's path
    pooling: str = "avg"  # avg or max, after the last feature map
    dropout: float = 0.2
    freeze_backbone: bool = False  # train the head alone (until trainer.unfreeze_at_epoch)
    kwargs: dict[str, Any] = field(default_factory=dict)  # more arguments for the application (alpha, ...)


@dataclass
class CustomModelConfig:
    """model=custom: any builder `(input_shape, num_classes, **kwargs) -> keras.Model` whose input
    is RGB scaled to [0, 1]."""

    _target_: str = MISSING
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimizerConfig:
    """conf/optimizer: any Keras optimizer by `_target_`; `learning_rate` is the peak, which
    conf/scheduler shapes over the run."""

    _target_: str = "keras.optimizers.Adam"
    learning_rate: float = 0.001
    weight_decay: float | None = None  # decoupled (AdamW, Lion, SGD: Keras's weight_decay)
    clipnorm: float | None = None  # each gradient's norm at most this
    global_clipnorm: float | None = None  # the norm of all gradients together at most this
    use_ema: bool = False  # keep an exponential moving average of the weights
    ema_momentum: float = 0.99
    kwargs: dict[str, Any] = field(default_factory=dict)  # the optimizer's own (momentum, beta_1, ...)


@dataclass
class SchedulerConfig:
    """conf/scheduler: the learning rate over the run, in steps (epochs × steps an epoch)."""

    name: str = "constant"  # constant | cosine | step | multistep | one_cycle
    warmup_epochs: float = 0.0  # cosine: a linear warm-up from 0 to the peak first
    final_fraction: float = 0.0  # cosine, one_cycle: the last learning rate, as a fraction of the peak
    every_epochs: int = 1  # step: the rate times `gamma` every this many epochs
    milestones: list[int] = field(default_factory=list)  # multistep: the epochs after which it is times `gamma`
    gamma: float = 0.1
    start_fraction: float = 0.04  # one_cycle: the first learning rate, as a fraction of the peak
    peak_at: float = 0.3  # one_cycle: where in the run the peak is, as a fraction of it


@dataclass
class LoggerConfig:
    """conf/logger: where the run's dashboards go (app/training/dashboards.py)."""

    name: str = "tensorboard"  # tensorboard | csv | none


@dataclass
class TrainerConfig:
    epochs: int = 8
    steps_per_epoch: int | None = None
    validation_steps: int | None = None  # null: every validation sample; N: the first N batches (debug)
    # N: train and validate on the same N batches every epoch (debug=overfit: does the model learn at all?)
    overfit_batches: int = 0
    # [first, last]: TensorBoard's profiler traces these global steps into <run dir>/tensorboard (debug=profile)
    profile_steps: list[int] | None = None
    checkpoint_every_steps: int | None = None  # a multiple of steps_per_execution
    unfreeze_at_epoch: int | None = None  # with model.freeze_backbone: the first epoch that trains the backbone
    grad_accum_steps: int = 1  # steps whose gradients are averaged into one update (small batches of large images)
    label_smoothing: float = 0.0
    class_weight: Any = None  # null, balanced (from the training split's labels), or {class name: weight}
    top_k: int | None = 5  # also top-k accuracy (when k is below the class count); null: none
    per_class_recall: bool = True  # also the recall of each class: recall_<class>
    monitor: str = "val_accuracy"  # what picks the best checkpoint and model.keras
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
    backend: Backend = Backend.tensorflow  # Keras's backend (KERAS_BACKEND), set before Keras loads
    strategy: Strategy = Strategy.default
    # N > 1: the CPU as N logical devices, so a strategy can be tried without GPUs
    cpu_devices: int = 1
    # data_parallel over several processes (JAX): process 0's host:port, the process count and this
    # process's id; null: one process, or what SLURM's variables say (srun, Hydra's submitit launcher)
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None


BENCH_MODES = ["baseline", "loader_steps", "loader_fit", "loader", "keras_threads", "keras_processes", "serial"]


@dataclass
class BenchConfig:
    """`python -m app bench` only."""

    modes: list[str] = field(default_factory=lambda: list(BENCH_MODES))  # app/commands/bench.py lists them
    batches: int = 20  # timed batches a mode
    warmup: int = 3  # batches before the clock starts (process start, tracing)
    # A second run of each mode, its tree's PSS sampled every 100 ms, for the peak; the timed
    # run is never sampled (app/commands/bench.py says why).
    memory: bool = True


@dataclass
class PreviewConfig:
    """`python -m app preview` only."""

    images: int = 4  # training samples, a row each
    augmentations: int = 6  # augmentations of each, beside its source image


@dataclass
class Config:
    seed: int = 0
    tags: list[str] = field(default_factory=list)  # into summary.json and TensorBoard, to find runs by
    print_config: bool = True  # train prints the composed config as a tree at start
    # null, a run directory, or `latest`: continue that run in place (app/training/resume.py)
    resume: str | None = None
    # predict only: an image file or a folder of them (searched recursively)
    input: str | None = None
    # evaluate only: which split (val, or test where the data has one) and which checkpoint
    # (last: the newest written at an epoch's end; best: by trainer.monitor; or a name, step-00000120)
    split: str = "val"
    checkpoint: str = "last"
    # Each group's own schema types its node (data has one a source).
    data: Any = MISSING
    augment: Any = MISSING
    queue: Any = MISSING
    model: Any = MISSING
    optimizer: Any = MISSING
    scheduler: Any = MISSING
    trainer: Any = MISSING
    logger: Any = MISSING
    preview: Any = MISSING
    bench: Any = MISSING


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(group="data", name="synthetic_schema", node=SyntheticDataConfig)
    cs.store(group="data", name="cifar_schema", node=CifarDataConfig)
    cs.store(group="data", name="folder_schema", node=FolderDataConfig)
    cs.store(group="augment", name="augment_schema", node=AugmentConfig)
    cs.store(group="queue", name="queue_schema", node=QueueConfig)
    cs.store(group="model", name="resnet_schema", node=ResnetModelConfig)
    cs.store(group="model", name="keras_app_schema", node=KerasAppConfig)
    cs.store(group="model", name="custom_schema", node=CustomModelConfig)
    cs.store(group="optimizer", name="optimizer_schema", node=OptimizerConfig)
    cs.store(group="scheduler", name="scheduler_schema", node=SchedulerConfig)
    cs.store(group="trainer", name="trainer_schema", node=TrainerConfig)
    cs.store(group="logger", name="logger_schema", node=LoggerConfig)
    cs.store(group="preview", name="preview_schema", node=PreviewConfig)
    cs.store(group="bench", name="bench_schema", node=BenchConfig)


SCHEMAS = {"augment": AugmentConfig, "queue": QueueConfig, "optimizer": OptimizerConfig, "scheduler": SchedulerConfig,
           "trainer": TrainerConfig, "logger": LoggerConfig, "bench": BenchConfig,
           "preview": PreviewConfig}
LOGGERS = ["tensorboard", "csv", "none"]
EVAL_TRANSFORMS = ["resize", "center_crop"]
SCHEDULERS = ["constant", "cosine", "step", "multistep", "one_cycle"]
MODEL_SCHEMAS = {"resnet": ResnetModelConfig, "keras_app": KerasAppConfig, "custom": CustomModelConfig}  # conf/model/


def model_schema(target: str | None) -> type:
    """A model node's schema, by its `_target_`: a builder of the user's has only `kwargs`."""
    known = {schema._target_: schema for schema in (ResnetModelConfig, KerasAppConfig)}
    return known.get(target, CustomModelConfig)
DATA_SCHEMAS = {"synthetic": SyntheticDataConfig, "cifar": CifarDataConfig, "folder": FolderDataConfig}
