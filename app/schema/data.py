"""The schemas of the data side's groups: data (one a source), augment, queue."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING, OmegaConf

# OmegaConf matches enum members by name, and `raise` is a keyword: hence the functional form.
OnBadSample = Enum("OnBadSample", {"raise": "raise", "skip": "skip"}, type=str)  # type: ignore[misc]


class Task(str, Enum):
    multiclass = "multiclass"  # one class an image: an integer label
    multilabel = "multilabel"  # any number of classes an image, none too: a 0/1 vector of them
    segmentation = "segmentation"  # a class a pixel: a mask of class indices an image (data.masks)


class Sampling(str, Enum):
    uniform = "uniform"  # each training sample once an epoch, shuffled (queue.shuffle)
    balanced = "balanced"  # drawn with replacement, each class as often
    weights = "weights"  # drawn with replacement in proportion to data.columns.weight (data=table)


class PixelType(str, Enum):
    uint8 = "uint8"  # 8-bit images: photos, most scans; a 16-bit image is refused
    uint16 = "uint16"  # 16-bit scans and multi-band rasters (Landsat, Sentinel-2); 8-bit images widened


class PatchMode(str, Enum):
    random = "random"  # data.patches.per_image patches an image an epoch, anywhere on its foreground
    grid = "grid"  # every foreground patch of a grid (data.patches.stride), each once an epoch


class Aggregate(str, Enum):
    """An image's score from its patches' (evaluate and predict)."""

    mean = "mean"
    max = "max"
    topk_mean = "topk_mean"  # the mean of the data.patches.top_k highest


class SlideReader(str, Enum):
    """What reads a patch's region (app/data/slides/regions.py, app/data/pixels/scanner_files.py)."""

    auto = "auto"  # OpenSlide for the scanners' files where the slides extra is installed, else tifffile
    tifffile = "tifffile"  # TIFFs (and small PNG, JPEG, WebP, BMP): no extra needed
    openslide = "openslide"  # every file through OpenSlide (the slides extra)


class StartMethod(str, Enum):
    spawn = "spawn"
    forkserver = "forkserver"


@dataclass
class DecodeConfig:
    draft: bool = True  # JPEG: decode at 1/2, 1/4 or 1/8 scale when the network input allows


@dataclass
class NormalizeConfig:
    """The model's first layer: (x − mean) / std a band, in the images' own units (0..255, 0..65535); all null: the
    values scaled to 0..1 by the type's largest (uint8: / 255, as before)."""

    mean: list[float] | None = None
    std: list[float] | None = None
    stats: str | None = None  # a stats.json `python -m app stats` wrote: its mean and std


@dataclass(kw_only=True)
class PatchesConfig:
    """Training on patches of large images (slides, scenes), each read region by region (app/data/slides/patches.py)."""

    size: list[int] | None = None  # [height, width] of a patch; null: whole images, no patches
    # the resolution, at most one set (none: level 0): a pyramid level, a downsample, or µm a pixel
    level: int | None = None
    downsample: float | None = None
    mpp: float | None = None
    mode: PatchMode = PatchMode.random  # training; validation, evaluate and predict take the grid
    stride: list[int] | None = None  # the grid's step, in patch pixels; null: the patch size
    per_image: int = 16  # random: patches an image an epoch
    min_foreground: float = 0.5  # a patch's share of foreground (0: every patch, the mask not made)
    mask_bands: list[int] | None = None  # the bands the mask is made of; null: saturation (RGB), else all
    aggregate: Aggregate = Aggregate.mean
    top_k: int = 5  # aggregate=topk_mean
    max_chunk_pixels: int = 16_777_216  # a file stored in larger tiles, strips or chunks is refused
    chunk_cache_mib: int = 64  # a worker's decoded TIFF chunks kept for the next patches that touch them; 0: none
    reader: SlideReader = SlideReader.auto  # auto: OpenSlide for SVS, NDPI, MRXS, ... where installed


# What builds each data option's source, its node's `_target_` (set by `data=<option>`).
DATA_TARGETS = {"synthetic": "app.data.sources.synthetic.synthetic_source",
                "cifar": "app.data.sources.cifar.cifar_source",
                "folder": "app.data.sources.folder.folder_source_of",
                "prepared": "app.data.copies.prepared.prepared_source",
                "table": "app.data.sources.table.table_source"}


@dataclass(kw_only=True)
class DataConfig:
    _target_: str = MISSING  # DATA_TARGETS: set by each conf/data file
    path: str | None = None
    image_size: list[int] = field(default_factory=lambda: [64, 64])
    batch_size: int = 32
    val_fraction: float | None = 0.2  # null only where the data gives the split (data=prepared)
    on_bad_sample: OnBadSample = OnBadSample["raise"]  # type: ignore[valid-type]
    max_bad_fraction: float = 0.01
    sampling: Sampling = Sampling.uniform  # the training split's draw each epoch; validation and test: never
    task: Task = Task.multiclass
    # rgb: 1, 3 or 4 bands made RGB; all: every band (as many as the first training image has); or band indices
    channels: Any = "rgb"
    dtype: PixelType = PixelType.uint8  # the images' samples, kept as integers to the model's first layer
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)
    # An image declaring more pixels is a bad sample, refused before any decode (a decompression
    # bomb: a few hundred bytes can declare 30000×30000). Pillow's own limit; null: none.
    max_image_pixels: int | None = 89_478_485
    # data.task=segmentation: the class names, in index order (a mask's values do not name themselves), and the
    # mask value that counts in no loss and no metric ("not annotated", "no data"), e.g. 255
    classes: list[str] | None = None
    ignore_index: int | None = None
    # data.task=segmentation with polygons (GeoJSON masks of data.patches): the class of the pixels no polygon covers;
    # null: data.ignore_index (out of the loss and the figures)
    masks_background: str | None = None


@dataclass(kw_only=True)
class SyntheticDataConfig(DataConfig):
    _target_: str = DATA_TARGETS["synthetic"]
    path: str | None = "datasets/synthetic"
    num_images: int = 800
    source_size: int = 1024
    num_classes: int = 4
    seed: int = 0
    num_test_images: int | None = None  # the test split, generated apart: null is a quarter of num_images


@dataclass(kw_only=True)
class CifarDataConfig(DataConfig):
    _target_: str = DATA_TARGETS["cifar"]
    path: str | None = "datasets/cifar10"
    image_size: list[int] = field(default_factory=lambda: [32, 32])
    batch_size: int = 64
    val_fraction: float = 0.1  # of each class of the training batches; the test batch is the test split
    download: bool = False


@dataclass(kw_only=True)
class FolderDataConfig(DataConfig):
    _target_: str = DATA_TARGETS["folder"]
    image_size: list[int] = field(default_factory=lambda: [128, 128])
    # the test split: <path>/test/<class>/ when it is there, else this folder of <class>/ (null: none)
    test_path: str | None = None
    test_fraction: float = 0.0  # or, in the flat layout <path>/<class>/, this fraction of each class
    patches: PatchesConfig = field(default_factory=PatchesConfig)
    masks: str | None = None  # data.task=segmentation: each image's mask at its relative path and stem under here


@dataclass(kw_only=True)
class TableColumns:
    # the image: a path (relative ones under data.root) or an id that data.path_format makes one; a table
    # with no `path` column but Hugging Face's `file_name` (ImageFolder's metadata) reads that
    path: str = "path"
    label: str | None = "label"  # null with data.columns.labels (a 0/1 column a class) alone
    split: str | None = None  # train, val (or validation), test a row; null: data.val_fraction splits the table
    group: str | None = None  # a patient, slide or scene: all of a group's rows go to one split
    weight: str | None = None  # a row's sampling weight (data.sampling=weights): a number, 0 or more
    labels: list[str] | None = None  # data.task=multilabel: one 0/1 column a class, each named as its class
    mask: str | None = None  # data.task=segmentation: the image's mask (a path, relative ones under data.root)
    # with data.patches: a row a patch of its image, its corner at level 0, labelled on its own
    x: str | None = None
    y: str | None = None


@dataclass(kw_only=True)
class TableDataConfig(DataConfig):
    """A table of samples (app/data/sources/table.py): a row an image, its label, optionally its split and group."""

    _target_: str = DATA_TARGETS["table"]
    table: str | None = None  # a .csv, .tsv, .jsonl or .parquet file
    root: str | None = None  # the folder relative paths are under; null: the table's own folder
    columns: TableColumns = field(default_factory=TableColumns)
    path_format: str | None = None  # e.g. "{}.jpg" or "images/{}.tif": ids without an extension made paths
    image_size: list[int] = field(default_factory=lambda: [128, 128])
    test_fraction: float = 0.0  # without a split column: this fraction of each class is the test split
    # data.task=multilabel: the label column's classes split by this (" ", "|"); none_label is the empty set
    # ("No Finding"); uncertain (-1 in a 0/1 column, as CheXpert marks it): refused, or read as zero or one
    label_separator: str | None = None
    none_label: str | None = None
    uncertain: str | None = None
    patches: PatchesConfig = field(default_factory=PatchesConfig)


@dataclass(kw_only=True)
class PreparedDataConfig(DataConfig):
    """A copy written by `python -m app prepare` (app/data/copies/shards.py): its splits are the copy's."""

    _target_: str = DATA_TARGETS["prepared"]
    # null: the copy's own validation split (prepare fixed it); any number is refused (app/rules/data.py)
    val_fraction: float | None = None
    # A URL data.path (s3://, gs://, https://): fsspec's options for its filesystem (s3fs: key,
    # secret, endpoint_url, ...); secrets are redacted wherever a config is saved or printed.
    storage_options: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = None  # a URL data.path: keep fetched shards here (null: read byte ranges only)
    cache_max_gb: float = 20.0  # the cache's cap: least recently used shards go first


def patches_of(data) -> PatchesConfig | None:
    """data.patches where the source's schema (a typed DictConfig's too) has them and a size turns them on."""
    patched = issubclass(OmegaConf.get_type(data), (FolderDataConfig, TableDataConfig))
    return data.patches if patched and data.patches.size is not None else None


def columns_of(data) -> TableColumns | None:
    return data.columns if issubclass(OmegaConf.get_type(data), TableDataConfig) else None  # a table's alone


@dataclass
class AugmentConfig:
    # albumentations transforms, one `_target_` mapping an entry; a resize to
    # data.image_size is appended. Validation images get that resize only.
    transforms: list[Any] = field(default_factory=list)
    # validation, evaluate and predict: resize (the whole image), or center_crop (the short side
    # scaled to the input size over eval_crop_fraction, then the centre cropped to the input size)
    eval_transform: str = "resize"
    eval_crop_fraction: float = 0.875


@dataclass(kw_only=True)
class QueueConfig:
    # An integer, `auto` (chosen at start-up by a short probe, app/capacity/auto.py) or null: `auto` where the
    # backend sees a GPU or TPU, else 2 (auto.asked). Any: OmegaConf's structured configs take no union of int and str.
    workers: Any = None
    use_multiprocessing: bool = True
    max_size: Any = None
    shuffle: bool = True
    start_method: StartMethod = StartMethod.forkserver
    timeout_s: float = 120.0  # for one batch, once the workers have started
    startup_timeout_s: float = 300.0  # for a worker process to start (imports, data source) before its first task
    # null: at most what the machine can hold (worker_limit()); a number replaces that limit
    worker_limit: int | None = None
    # MiB of host memory training may take: `train` refuses a config whose predicted peak
    # (`python -m app plan`) is above it, naming the fixes; null: what the machine has available
    memory_budget_mb: int | None = None
