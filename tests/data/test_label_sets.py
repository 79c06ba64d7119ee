"""Several labels an image (app/data/sources/label_sets.py, read through data=table): Planet's space-separated
tags, ChestX-ray14's `|` with `No Finding`, CheXpert-style 0/1/-1 columns; the sets as uint8
vectors; a rare class stratified into validation."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from PIL import Image

from app.data.sources import label_sets
from app.data.sources.table import table_source
from app.errors import DataError
from app.schema import TableColumns, TableDataConfig, Task


def test_a_cell_is_a_sorted_set_and_none_label_the_empty_one():
    assert label_sets.from_cell("clear primary  agriculture primary", separator=" ", none_label=None) == \
        ("agriculture", "clear", "primary")
    assert label_sets.from_cell("Effusion|Infiltration", separator="|", none_label="No Finding") == \
        ("Effusion", "Infiltration")
    assert label_sets.from_cell("No Finding", separator="|", none_label="No Finding") == ()
    assert label_sets.from_cell("", separator="|", none_label=None) == ()
    assert label_sets.from_cell("No Finding", separator="|", none_label=None) == ("No Finding",)  # negative control
    with pytest.raises(label_sets.LabelFault, match=r"'No Finding' \(data.none_label\) means no class, yet the cell "
                                                    "also names Effusion"):
        label_sets.from_cell("No Finding|Effusion", separator="|", none_label="No Finding")


def test_zero_one_columns_and_the_uncertain_minus_one():
    values = {"a": "1", "b": "0", "c": "", "d": "-1"}
    with pytest.raises(label_sets.LabelFault, match="uncertain") as refused:
        label_sets.from_columns(values, ["a", "b", "c", "d"], None)
    assert refused.value.column == "d"
    assert label_sets.from_columns(values, ["a", "b", "c", "d"], "zero") == ("a",)
    assert label_sets.from_columns(values, ["a", "b", "c", "d"], "one") == ("a", "d")
    with pytest.raises(label_sets.LabelFault, match="'maybe' is not 0 or 1"):
        label_sets.from_columns({"a": "maybe"}, ["a"], None)


def test_vectors_and_the_rarest_class_as_stratum():
    sets = [("a", "b"), ("b",), (), ("b", "c")]
    assert label_sets.vectors(sets, ["a", "b", "c"]).tolist() == [[1, 1, 0], [0, 1, 0], [0, 0, 0], [0, 1, 1]]
    assert label_sets.vectors(sets, ["a", "b", "c"]).dtype == np.uint8
    assert label_sets.strata(sets) == ["a", "b", label_sets.NONE, "c"]
    names = ["a", "b", "c"]
    assert [label_sets.text(v, names) for v in label_sets.vectors(sets, names)] == ["a+b", "b", "(none)", "b+c"]
    assert label_sets.text(np.int64(2), names) == "c"  # one class an image: its name


@pytest.fixture
def planet(tmp_path):
    """A Planet-style CSV: image_name without an extension, space-separated tags, some rows empty; `haze` rare."""
    (tmp_path / "train-jpg").mkdir()
    tags = ["clear primary", "clear agriculture primary", "", "cloudy", "clear primary road", "haze primary"]
    with open(tmp_path / "train_v2.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["image_name", "tags"])
        for i in range(60):
            name = f"train_{i}"
            Image.new("RGB", (8, 8)).save(tmp_path / "train-jpg" / f"{name}.jpg")
            writer.writerow([name, tags[i % 6] if i % 6 != 5 or i < 12 else "clear primary"])
    return tmp_path / "train_v2.csv"


def test_a_planet_table_gives_label_vectors_and_a_rare_class_reaches_validation(planet):
    data = TableDataConfig(table=str(planet), task=Task.multilabel, label_separator=" ", val_fraction=0.2,
                           columns=TableColumns(path="image_name", label="tags"), path_format="train-jpg/{}.jpg")
    source = table_source(data)
    assert source.class_names == ["agriculture", "clear", "cloudy", "haze", "primary", "road"]
    assert source.train.labels.dtype == np.uint8 and source.train.labels.shape == (len(source.train), 6)
    empty = source.split["train"].index("train-jpg/train_2.jpg") if "train-jpg/train_2.jpg" in source.split["train"] \
        else None
    assert empty is None or not source.train.labels[empty].any()  # an empty cell: no class, a valid row
    haze = source.class_names.index("haze")  # 2 rows of 60: the rarest, stratified so one is held out
    assert source.train.labels[:, haze].sum() == 1 and source.val.labels[:, haze].sum() == 1
    with pytest.raises(DataError, match="line 4, column `tags`: the label is empty"):  # negative control: one
        table_source(TableDataConfig(table=str(planet), columns=TableColumns(path="image_name", label="tags"),
                                     path_format="train-jpg/{}.jpg"))


def test_a_label_outside_data_classes_is_a_row_fault(planet):
    data = TableDataConfig(table=str(planet), task=Task.multilabel, label_separator=" ",
                           classes=["clear", "primary", "cloudy", "agriculture", "road"],
                           columns=TableColumns(path="image_name", label="tags"), path_format="train-jpg/{}.jpg")
    with pytest.raises(DataError, match=r"line 2, column `tags`: label\(s\) haze are none of data.classes|"
                                        r"column `tags`: label\(s\) haze"):
        table_source(data)


def test_the_rules_ask_a_multilabel_run_for_a_table_and_how_to_read_its_labels():
    from hydra import compose, initialize_config_dir

    from app.config import conf_dir, load
    from app.errors import ConfigError
    from app.schema import register

    register()

    def loaded(*overrides):
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            return load(compose("config", overrides=list(overrides)))

    table = ["data=table", "data.table=t.csv", "data.task=multilabel"]
    for overrides, key in [(["data.task=multilabel"], "data.task"), (table, "data.task"),
                           ([*table, "data.label_separator=' '", "data.sampling=balanced"], "data.sampling"),
                           ([*table, "data.label_separator=' '", "data.uncertain=maybe"], "data.uncertain"),
                           ([*table, "data.label_separator=' '", "trainer.top_k=3"], "trainer.top_k.*multilabel"),
                           (["trainer.top_k=1"], "trainer.top_k")]:
        with pytest.raises(ConfigError, match=key):
            loaded(*overrides)
    assert loaded(*table, "data.label_separator='|'").data.label_separator == "|"  # negative control
    assert loaded(*table, "data.columns.labels=[a,b]").data.columns.labels == ["a", "b"]
    assert loaded(*table, "data.columns.labels=[a,b]", "trainer.top_k=null").trainer.top_k is None
    assert loaded(*table, "data.columns.labels=[a,b]", "data.columns.label=null").data.columns.label is None
    for overrides, key in [(["data=table", "data.table=t.csv", "data.columns.label=null"], "data.columns.label"),
                           (["data=table", "data.table=t.csv", "data.columns.labels=[a,b]"], "data.columns.labels")]:
        with pytest.raises(ConfigError, match=key):
            loaded(*overrides)
    assert loaded("trainer.top_k=3").trainer.top_k == 3


def test_zero_one_columns_need_no_label_column_and_none_label_beside_a_class_is_a_row_fault(tmp_path):
    (tmp_path / "xrays").mkdir()
    rows = []
    for i in range(12):
        Image.new("L", (8, 8)).save(tmp_path / "xrays" / f"{i}.png")
        rows.append([f"xrays/{i}.png", i % 2, (i // 2) % 2, ["No Finding", "Effusion", "Effusion|Edema"][i % 3]])
    with open(tmp_path / "t.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "Edema", "Effusion", "findings"], *rows])
    columns = TableDataConfig(table=str(tmp_path / "t.csv"), task=Task.multilabel,
                              columns=TableColumns(labels=["Edema", "Effusion"], label=None))
    assert table_source(columns).class_names == ["Edema", "Effusion"]  # no `label` column in the table
    columns.columns.label = "label"  # the schema's default name, not in the table: no matter beside the 0/1 ones
    assert table_source(columns).class_names == ["Edema", "Effusion"]
    separated = TableDataConfig(table=str(tmp_path / "t.csv"), task=Task.multilabel, label_separator="|",
                                none_label="No Finding", columns=TableColumns(label="findings"))
    assert table_source(separated).class_names == ["Edema", "Effusion"]  # negative control: the cells as they are
    rows[7][3] = "No Finding|Effusion"
    with open(tmp_path / "t.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "Edema", "Effusion", "findings"], *rows])
    with pytest.raises(DataError, match=r"line 9, column `findings`: 'No Finding' \(data.none_label\) means no class"):
        table_source(separated)
