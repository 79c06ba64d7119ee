"""The config's schema, enforced by OmegaConf as Hydra composes: a dataclass a group; the root `Config`, or a command's
own (COMMAND_SCHEMAS); closed groups (data, scheduler, logger) name one of ours, open ones any importable target."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from app.schema.data import (
    DATA_TARGETS,
    AugmentConfig,
    CifarDataConfig,
    DataConfig,
    DecodeConfig,
    FolderDataConfig,
    OnBadSample,
    PixelType,
    PreparedDataConfig,
    QueueConfig,
    Sampling,
    StartMethod,
    SyntheticDataConfig,
    TableColumns,
    TableDataConfig,
    Task,
)
from app.schema.training import (
    LOGGER_TARGETS,
    SCHEDULER_TARGETS,
    Backend,
    CsvLoggerConfig,
    CustomModelConfig,
    KerasAppConfig,
    LoggerConfig,
    MlflowLoggerConfig,
    ModelConfig,
    OptimizerConfig,
    Precision,
    ResnetModelConfig,
    SchedulerConfig,
    Strategy,
    TensorBoardLoggerConfig,
    TrainerConfig,
)

__all__ = ["AugmentConfig", "Backend", "BenchCommandConfig", "CifarDataConfig", "Config", "CsvLoggerConfig",
           "CustomModelConfig", "DataConfig", "DecodeConfig", "FolderDataConfig", "KerasAppConfig", "LoggerConfig",
           "MlflowLoggerConfig", "ModelConfig", "OnBadSample", "OptimizerConfig", "Precision", "PrepareCommandConfig",
           "PrepareConfig", "PreparedDataConfig", "PreviewCommandConfig", "QueueConfig", "ResnetModelConfig",
           "PixelType", "Sampling", "SchedulerConfig", "SlidePredictConfig", "StartMethod", "Strategy",
           "SyntheticDataConfig", "TableColumns", "TableDataConfig", "Task", "TensorBoardLoggerConfig",
           "TrainerConfig", "register", "model_schema", "ExportConfig", "ExportCommandConfig", "EXPORT_TOLERANCE",
           "EXPORT_WRITTEN"]

BENCH_MODES = ["baseline", "loader_steps", "loader_fit", "loader", "keras_threads", "keras_processes", "keras_regions",
               "tf_data", "serial"]
# Named in bench.modes only, never a default: a segmentation run's slides predicted whole, the app against a Keras loop
SLIDE_BENCH_MODES = ["slide_predict", "keras_slide_loop"]


@dataclass(kw_only=True)
class BenchConfig:
    """`python -m app bench` only."""

    modes: list[str] = field(default_factory=lambda: list(BENCH_MODES))  # app/commands/bench.py lists them
    batches: int = 20  # timed batches a mode
    warmup: int = 3  # batches before the clock starts (process start, tracing)
    # A second run of each mode, its tree's PSS sampled every 100 ms, for the peak; the timed
    # run is never sampled (app/commands/bench.py says why).
    memory: bool = True
    # Prepared copies of the benched data (folders or URLs, `python -m app prepare`): every mode
    # runs on each too, beside the originals (app/bench/copies.py).
    prepared: list[str] = field(default_factory=list)
    cache_dir: str | None = None  # copies at a URL also run through this shard cache (data.cache_dir)


@dataclass
class PreviewConfig:
    """`python -m app preview` only."""

    images: int = 4  # training samples, a row each
    augmentations: int = 6  # augmentations of each, beside its source image
    bands: list[int] | None = None  # three bands shown as red, green, blue (null: 8-bit RGB as it is, else 0, 1, 2)


@dataclass(kw_only=True)
class PrepareConfig:
    """`python -m app prepare` only (app/prepare/)."""

    out: str | None = None  # the folder or URL (s3://, gs://) the prepared copy is written to
    # auto (the smallest every crop of the train and eval transforms needs), an integer, or full.
    # Any: OmegaConf's structured configs take no union of int and str.
    short_side: Any = "auto"
    format: str = "jpeg"  # jpeg | raw (uint8 .npy: no decode at all, the largest)
    quality: int = 95  # jpeg only, 4:4:4
    shard_mb: int = 256  # about this many MiB a shard
    patch_draws: int | None = None  # data.patches: random patches an image for training (null: its whole grid)
    storage_options: dict[str, Any] = field(default_factory=dict)  # fsspec's, for a URL prepare.out


# export.format → the largest difference of probabilities its parity check allows (export.tolerance=null):
# float32 graphs agree with Keras to rounding; LiteRT's kernels fuse and reorder more.
EXPORT_TOLERANCE = {"tf_saved_model": 1e-4, "onnx": 1e-4, "litert": 1e-3}
# export.format → the file (or folder) written inside export.out; LiteRT's must end in .tflite
EXPORT_WRITTEN = {"tf_saved_model": "saved_model", "onnx": "model.onnx", "litert": "model.tflite"}


@dataclass(kw_only=True)
class ExportConfig:
    """`python -m app export` only (app/commands/export.py)."""

    format: str = "tf_saved_model"  # tf_saved_model, onnx or litert
    out: str | None = None  # null: <run dir>/export/<format>/
    samples: int | None = None  # null: the parity check predicts every validation sample; N: the first N
    tolerance: float | None = None  # null: EXPORT_TOLERANCE's for the format


@dataclass(kw_only=True)
class SlidePredictConfig:
    """A segmentation run's slides predicted whole (`predict`, and `evaluate` of its validation slides)."""

    overlap: float = 0.25  # of a tile, shared with each neighbour; 0: tiles side by side
    blend: str = "gaussian"  # gaussian: a tile's centre weighs most (MONAI's sliding window); mean: alike
    probability: str | None = None  # predict: a class whose probability is written as a second pyramid


@dataclass(kw_only=True)
class Config:
    seed: int = 0
    tags: list[str] = field(default_factory=list)  # into summary.json and TensorBoard, to find runs by
    print_config: bool = True  # train prints the composed config as a tree at start
    # null, a run directory, or `latest`: continue that run in place (app/cli/argv.py)
    resume: str | None = None
    # train: a hydra.run.dir (or hydra.sweep.dir) that holds a run is refused; true moves that run aside
    # to <folder>.old first (app/cli/argv.py). export: the same for export.out (app/commands/export.py)
    overwrite: bool = False
    # Each group's own schema types its node; data and model have one a choice, extending these
    # (data: SyntheticDataConfig, CifarDataConfig, FolderDataConfig, PreparedDataConfig, TableDataConfig; model:
    # ResnetModelConfig, KerasAppConfig, CustomModelConfig), picked by the node's `_target_` as every group chooses.
    data: DataConfig = MISSING
    augment: AugmentConfig = MISSING
    queue: QueueConfig = MISSING
    model: ModelConfig = MISSING
    optimizer: OptimizerConfig = MISSING
    scheduler: SchedulerConfig = MISSING
    trainer: TrainerConfig = MISSING
    logger: LoggerConfig = field(default_factory=LoggerConfig)  # logger=none (or []): no node chosen


@dataclass(kw_only=True)
class EvaluateConfig(Config):
    """`python -m app evaluate` composes conf/evaluate.yaml: the run's keys and these."""

    split: str = "val"  # val, or test where the data has one
    # last: the newest written at an epoch's end; best: by trainer.monitor; or a name, step-00000120
    checkpoint: str = "last"
    predict: SlidePredictConfig = field(default_factory=SlidePredictConfig)  # validation slides, segmented whole


@dataclass(kw_only=True)
class PredictConfig(Config):
    """`python -m app predict` composes conf/predict.yaml: the run's keys and these."""

    input: str | None = None  # an image file or a folder of them (searched recursively)
    # a multilabel run's thresholds.json (evaluate writes the run's own); null: the run's, else trainer.threshold
    thresholds: str | None = None
    predict: SlidePredictConfig = field(default_factory=SlidePredictConfig)  # a segmentation run's slides


@dataclass(kw_only=True)
class BenchCommandConfig(Config):
    """`python -m app bench` composes conf/bench.yaml: the common keys and bench's group."""

    bench: BenchConfig = MISSING


@dataclass(kw_only=True)
class PreviewCommandConfig(Config):
    """`python -m app preview` composes conf/preview.yaml: the common keys and preview's group."""

    preview: PreviewConfig = MISSING


@dataclass(kw_only=True)
class PrepareCommandConfig(Config):
    """`python -m app prepare` composes conf/prepare.yaml: the common keys and prepare's group."""

    prepare: PrepareConfig = MISSING


@dataclass(kw_only=True)
class ExportCommandConfig(Config):
    """`python -m app export` composes conf/export.yaml: the run's keys, export's group and `checkpoint`."""

    checkpoint: str | None = None  # null: the run's model.keras; else as evaluate's: last, best or a name
    export: ExportConfig = MISSING


# command word → its root schema, where it has keys of its own
COMMAND_SCHEMAS = {"evaluate": EvaluateConfig, "predict": PredictConfig, "bench": BenchCommandConfig,
                   "preview": PreviewCommandConfig, "prepare": PrepareCommandConfig, "export": ExportCommandConfig}
# top-level key → the commands that read it from their own config, never from (or into) a run's
COMMAND_OF = {name: tuple(word for word, schema in COMMAND_SCHEMAS.items() if name in {k.name for k in fields(schema)})
              for name in {key.name for schema in COMMAND_SCHEMAS.values() for key in fields(schema)}
              - {common.name for common in fields(Config)}}
COMMAND_KEYS = tuple(sorted(COMMAND_OF))


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(name="evaluate_schema", node=EvaluateConfig)
    cs.store(name="predict_schema", node=PredictConfig)
    cs.store(name="bench_command_schema", node=BenchCommandConfig)
    cs.store(name="preview_command_schema", node=PreviewCommandConfig)
    cs.store(name="prepare_command_schema", node=PrepareCommandConfig)
    cs.store(name="export_command_schema", node=ExportCommandConfig)
    cs.store(group="data", name="synthetic_schema", node=SyntheticDataConfig)
    cs.store(group="data", name="cifar_schema", node=CifarDataConfig)
    cs.store(group="data", name="folder_schema", node=FolderDataConfig)
    cs.store(group="data", name="prepared_schema", node=PreparedDataConfig)
    cs.store(group="data", name="table_schema", node=TableDataConfig)
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
    cs.store(group="prepare", name="prepare_schema", node=PrepareConfig)
    cs.store(group="export", name="export_schema", node=ExportConfig)


SCHEMAS = {"augment": AugmentConfig, "queue": QueueConfig, "optimizer": OptimizerConfig, "scheduler": SchedulerConfig,
           "trainer": TrainerConfig, "logger": LoggerConfig, "bench": BenchConfig,
           "preview": PreviewConfig, "prepare": PrepareConfig, "export": ExportConfig}
EVAL_TRANSFORMS = ["resize", "center_crop"]
# The groups whose options are ours alone: each option sets the node's `_target_` to one of these.
TARGETS = {"data": DATA_TARGETS, "scheduler": SCHEDULER_TARGETS, "logger": LOGGER_TARGETS}
MODEL_SCHEMAS = {"resnet": ResnetModelConfig, "keras_app": KerasAppConfig, "custom": CustomModelConfig}  # conf/model/


def model_schema(target: str | None) -> type:
    """A model node's schema, by its `_target_`: a builder of the user's has only `kwargs`."""
    known = {schema._target_: schema for schema in (ResnetModelConfig, KerasAppConfig)}
    return known.get(target, CustomModelConfig)


DATA_SCHEMAS = {"synthetic": SyntheticDataConfig, "cifar": CifarDataConfig, "folder": FolderDataConfig,
                "prepared": PreparedDataConfig, "table": TableDataConfig}


def option_of(group: str, target: str) -> str | None:
    """The option of `group` (data=folder: `folder`) whose `_target_` this is; None: none of ours."""
    return next((option for option, known in TARGETS[group].items() if known == target), None)


def schema_of(node) -> type:
    # the schema a group's node was typed by (a typed DictConfig's, or a dataclass's own): what decides its kind
    return OmegaConf.get_type(node)


def data_schema(target: str | None) -> type | None:
    return DATA_SCHEMAS.get(option_of("data", str(target)))
