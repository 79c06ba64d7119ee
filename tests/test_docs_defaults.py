"""Every default README.md and docs/ state, against the YAML in conf/ (what a run composes): the
schema's defaults equal the YAML (tests/test_schema.py), and the pages say what both say. A line
of a page that uses the word `default` is either a stated default, checked here with the values it
states, or listed as saying none."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from app.config import conf_dir, to_plain
from app.schema import register

register()
ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
RESNET = {"model._target_": "app.model.small_resnet"}
SYNTHETIC = {"data._target_": "app.data.sources.synthetic.synthetic_source"}
TENSORBOARD = {"logger.tensorboard._target_": "app.tracking.dashboards.TensorBoardWriter", "logger.mlflow": None}

# (page, words as the page has them on one line, the config values they state)
STATED = [
    ("README.md", "the offline default dataset (800", {**SYNTHETIC, "data.num_images": 800}),
    ("docs/data.md", "`synthetic` (default)", SYNTHETIC),
    ("docs/labels.md", "`data.task=multiclass` (the default)", {"data.task": "multiclass"}),
    ("docs/data.md", "`rgb` (the default: 1, 3 or 4 bands", {"data.channels": "rgb"}),
    ("docs/data.md", "`uint8` (the default) or `uint16`", {"data.dtype": "uint8"}),
    ("docs/labels.md", "`auto`, the default, is none here", {"trainer.top_k": "auto"}),
    ("docs/data.md", "89.5 M, by default", {"data.max_image_pixels": 89_478_485}),
    ("docs/models.md", "`model=resnet` (the default", RESNET),
    ("docs/models.md", "`trainer.backend=auto`, the default", {"trainer.backend": "auto"}),
    ("README.md", "`trainer.backend=auto`, the default", {"trainer.backend": "auto"}),
    ("README.md", "now the default where a GPU is seen", {"queue.workers": None}),
    ("docs/queue.md", "`queue.start_method=forkserver` (the default)", {"queue.start_method": "forkserver"}),
    ("docs/performance.md", "`queue.start_method=forkserver`, the default since", {"queue.start_method": "forkserver"}),
    ("README.md", "default where training sees a GPU or TPU", {"queue.workers": None, "queue.max_size": None}),
    ("docs/performance.md", "the defaults now `auto` where a GPU is seen",
     {"queue.workers": None, "queue.max_size": None}),
    ("docs/performance.md", "TensorFlow's default strategy no longer", {"trainer.strategy": "default"}),
    ("docs/models.md", "TensorFlow's default strategy, fed the", {"trainer.strategy": "default"}),
    ("docs/performance.md", "## The default data", SYNTHETIC),
    ("docs/performance.md", "default synthetic data", SYNTHETIC),
    ("docs/performance.md", "`data.decode.draft=true`, the default", {"data.decode.draft": True}),
    ("docs/performance.md", "the default draft rule", {"data.decode.draft": True}),
    ("docs/performance.md", "the default model and data", {**RESNET, **SYNTHETIC}),
    ("docs/performance.md", "Default data (800", {**SYNTHETIC, "data.num_images": 800}),
    ("docs/queue.md", "both null by default", {"queue.workers": None, "queue.max_size": None}),
    ("docs/queue.md", "### The defaults, by machine", {"queue.workers": None, "queue.max_size": None}),
    ("docs/performance.md", "of the default run", {**RESNET, **SYNTHETIC}),
    ("docs/performance.md", "-default-", {"trainer.strategy": "default"}),  # the runs' names
    ("docs/run-directory.md", "`logger=tensorboard`, the default", TENSORBOARD),
    ("docs/runs.md", "on the default data", SYNTHETIC),
    ("docs/prepare.md", "`raise` (the default)", {"data.on_bad_sample": "raise"}),
    ("docs/prepare.md", "on the default data", {**SYNTHETIC, "data.num_images": 800, "data.image_size": [64, 64]}),
    # prepare's table, a row a key (its header says `default`)
    ("docs/prepare.md", "| `prepare.out` | (required) |", {"prepare.out": None}),
    ("docs/prepare.md", "| `prepare.short_side` | `auto` |", {"prepare.short_side": "auto"}),
    ("docs/prepare.md", "| `prepare.format` | `jpeg` |", {"prepare.format": "jpeg"}),
    ("docs/prepare.md", "| `prepare.quality` | `95` |", {"prepare.quality": 95}),
    ("docs/prepare.md", "| `prepare.shard_mb` | `256` |", {"prepare.shard_mb": 256}),
    ("docs/troubleshooting.md", "`raise` (the default)", {"data.on_bad_sample": "raise"}),
    ("docs/troubleshooting.md", "(default 89,478,485", {"data.max_image_pixels": 89_478_485}),
    ("docs/troubleshooting.md", "the default model on 64 images", RESNET),
    ("docs/segmentation.md", "`model=resnet` (the default)", RESNET),
    ("docs/segmentation.md", "`crossentropy` (the default)", {"trainer.loss": "crossentropy"}),
]
# (page, words): lines that use the word and state no value of this app's config
NOT_A_SETTING = [
    ("docs/prepare.md", "| key | default | what it does |"),  # the table's header: its rows are in STATED
    ("docs/slides.md", "| key | default | what it does |"),  # its rows: test_the_slides_table_is_data_patches
    ("docs/architecture.md", "Schema defaults equal"),  # the rules this test belongs to
    ("docs/architecture.md", "every default"),
    ("docs/architecture.md", "`tests/test_docs_defaults.py`"),
    ("docs/performance.md", "glibc's default allocator"),
    ("docs/performance.md", "by default each sample's"),  # glibc's behaviour
    ("docs/performance.md", "the earlier defaults"),  # the recipe a measurement ran with
    ("docs/queue.md", "`conf/queue/default.yaml`"),  # a file's name
    ("docs/queue.md", "(`queue_default`)"),  # summary.json's key
    ("docs/queue.md", "its own default on Linux"),  # Python's
    ("README.md", "the queue's old default"),  # what a measurement ran with
    ("docs/models.md", "the old default"),
    ("docs/performance.md", "default then"),
    ("docs/performance.md", "with `augment=default` and 2 workers"),  # the augment option the bench ran with
]


@pytest.fixture(scope="module")
def defaults() -> dict:
    """The config a command composes with no overrides, as plain values; prepare's group from its own."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return {**to_plain(compose("config")), "prepare": to_plain(compose("prepare"))["prepare"]}


def wrong_values(stated: dict, plain: dict) -> list[str]:
    """The stated values the composed config does not have, said as `key: stated, composed`."""
    wrong = []
    for key, value in stated.items():
        node = plain
        for part in key.split("."):
            node = node[part]
        if node != value:
            wrong.append(f"{key}: {value!r} stated, {node!r} in conf/")
    return wrong


def unaccounted(page: str, text: str) -> list[str]:
    """The page's lines that use the word `default` and match no entry of STATED or NOT_A_SETTING."""
    words = [w for p, w, *_ in STATED + NOT_A_SETTING if p == page]
    return [f"{page}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if re.search("default", line, re.IGNORECASE) and not any(w in line for w in words)]


@pytest.mark.parametrize(("page", "words", "stated"), STATED, ids=[f"{p}:{w}" for p, w, _ in STATED])
def test_each_stated_default_is_the_yamls(page, words, stated, defaults):
    assert words in (ROOT / page).read_text(encoding="utf-8"), f"{page} no longer says {words!r}: update STATED"
    assert not wrong_values(stated, defaults), f"{page} says {words!r}: {wrong_values(stated, defaults)}"


def test_every_default_a_page_states_is_checked():
    lines = [line for page in PAGES for line in unaccounted(page, (ROOT / page).read_text(encoding="utf-8"))]
    assert not lines, "pages state defaults this test does not check: add them to STATED (or NOT_A_SETTING):\n" + \
        "\n".join(lines)


def test_the_checks_catch_a_wrong_or_new_default(defaults):  # negative controls for the two above
    assert wrong_values({"data.num_images": 801, "queue.workers": None}, defaults) == \
        ["data.num_images: 801 stated, 800 in conf/"]
    assert unaccounted("docs/queue.md", "`queue.workers` is 3 by default.\n`conf/queue/default.yaml`") == \
        ["docs/queue.md:1: `queue.workers` is 3 by default."]


def test_the_slides_table_is_data_patches():
    """docs/slides.md's table of data.patches, row for row, against a folder source's composed config."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        plain = to_plain(compose("config", overrides=["data=folder"]))
    text = (ROOT / "docs" / "slides.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(data\.patches\.\w+)` \| ([^|]+?) \|", text, re.MULTILINE)
    assert {key for key, _ in rows} == {f"data.patches.{key}" for key in plain["data"]["patches"]}
    stated = {key: None if value == "null" else yaml.safe_load(value.replace(",", "")) for key, value in rows}
    assert not wrong_values(stated, plain)
    assert wrong_values({**stated, "data.patches.per_image": 17}, plain)  # negative control
