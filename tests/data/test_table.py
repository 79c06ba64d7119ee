"""data=table (app/data/sources/table.py, app/data/sources/table_files.py) on real tables: CSV and TSV written by
the standard library's csv, JSON Lines by json, Parquet by pyarrow; real image files beside them."""

from __future__ import annotations

import csv
import json
import re
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from app.data.sources.table import table_source
from app.errors import DataError
from app.schema import OnBadSample, TableColumns, TableDataConfig, Task

ROWS = 30


def write_images(folder, names) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        Image.new("RGB", (8, 8), (len(name) * 7 % 255, 0, 0)).save(folder / name)


def write_table(path, columns: list[str], rows: list[list]) -> None:
    """`rows` under `columns` in the format `path`'s suffix names, each written by its own library."""
    if path.suffix in (".csv", ".tsv"):
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, delimiter="\t" if path.suffix == ".tsv" else ",")
            writer.writerows([columns, *rows])
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(dict(zip(columns, row, strict=True))) + "\n" for row in rows))
    else:
        pq.write_table(pa.table({c: [row[i] for row in rows] for i, c in enumerate(columns)}), path)


def config(table, **values) -> TableDataConfig:
    return TableDataConfig(table=str(table), **values)


@pytest.fixture
def images(tmp_path):
    names = [f"img{i:02d}.png" for i in range(ROWS)]
    write_images(tmp_path / "images", names)
    return names


def sample_rows(names) -> list[list]:
    return [[f"images/{name}", ["cat", "dog", "owl"][i % 3]] for i, name in enumerate(names)]


def summary(source) -> tuple:
    return json.dumps([source.class_names, source.split["train"], source.split["val"], source.train.labels.tolist(),
                       source.val.labels.tolist()])


def test_the_same_table_as_csv_tsv_jsonl_and_parquet_gives_the_same_splits_and_labels(tmp_path, images):
    rows = sample_rows(images)
    found = {}
    for suffix in (".csv", ".tsv", ".jsonl", ".parquet"):
        table = tmp_path / f"labels{suffix}"
        # JSON Lines as Hugging Face's ImageFolder metadata has it: `file_name`
        write_table(table, ["file_name" if suffix == ".jsonl" else "path", "label"], rows)
        found[suffix] = summary(table_source(config(table)))
    assert len(set(found.values())) == 1, found
    names, train, val, _, _ = json.loads(found[".csv"])
    assert names == ["cat", "dog", "owl"] and len(train) + len(val) == ROWS and 0 < len(val) < ROWS / 2
    changed = sample_rows(images)
    changed[0][1] = "owl"  # negative control: one label changed is seen
    write_table(tmp_path / "other.csv", ["path", "label"], changed)
    assert summary(table_source(config(tmp_path / "other.csv"))) != found[".csv"]


def test_ids_take_the_path_format_and_a_leading_zero_stays(tmp_path):
    write_images(tmp_path / "scans", ["000123.png", "000124.png", "000125.png", "000126.png"])
    table = tmp_path / "train.csv"
    write_table(table, ["image_id", "label"], [["000123", 0], ["000124", 1], ["000125", 0], ["000126", 1]])
    source = table_source(config(table, columns=TableColumns(path="image_id"), path_format="scans/{}.png"))
    assert sorted(source.split["train"] + source.split["val"]) == [f"scans/00012{i}.png" for i in range(3, 7)]
    assert source.class_names == ["0", "1"]
    # negative control: the id read as a number loses its zeros, and no such file is there
    write_table(table, ["image_id", "label"], [[123, 0], [124, 1], [125, 0], [126, 1]])
    with pytest.raises(DataError, match=r"line 2, column `image_id`: .*scans/123\.png cannot be read"):
        table_source(config(table, columns=TableColumns(path="image_id"), path_format="scans/{}.png"))


FAULTS = {  # row 5 (line 6 of the CSV) broken: what its message must say
    "a missing file": (lambda row: ["images/gone.png", row[1]], "column `path`: .*gone.png cannot be read"),
    "an empty label": (lambda row: [row[0], ""], "column `label`: the label is empty"),
    "an unknown label": (lambda row: [row[0], "bat"], "column `label`: label 'bat' is none of data.classes"),
    "a duplicated path": (lambda row: ["images/img00.png", row[1]], "column `path`: images/img00.png is listed "
                                                                    "already, at line 2"),
    "a wrong number of fields": (lambda row: [*row, "extra"], ": it has 3 fields, the header 2"),
}


@pytest.mark.parametrize("fault", FAULTS, ids=list(FAULTS))
def test_each_row_fault_names_the_table_the_line_and_the_column(tmp_path, images, fault):
    broken, message = FAULTS[fault]
    rows = sample_rows(images)
    rows[4] = broken(rows[4])
    table = tmp_path / "labels.csv"
    write_table(table, ["path", "label"], rows)
    with pytest.raises(DataError, match=f"labels.csv, line 6.*{message}") as refused:
        table_source(config(table, classes=["cat", "dog", "owl"]))
    assert "data.on_bad_sample=skip" in str(refused.value)
    skipped = table_source(config(table, classes=["cat", "dog", "owl"], on_bad_sample=OnBadSample["skip"],
                                  max_bad_fraction=0.05))
    assert [line for line, _, _ in skipped.left_out] == [6] and skipped.split["left_out"] == [6]
    assert len(skipped.train) + len(skipped.val) == ROWS - 1
    with pytest.raises(DataError, match="1 of the 30 rows .* more than data.max_bad_fraction=0.01"):
        table_source(config(table, classes=["cat", "dog", "owl"], on_bad_sample=OnBadSample["skip"]))


def test_split_and_group_columns_are_checked_row_by_row(tmp_path, images):
    header, columns = ["path", "label", "split", "group"], TableColumns(split="split", group="group")
    rows = [[*row, ["train", "val", "test"][i // 3 % 3], f"p{i}"] for i, row in enumerate(sample_rows(images))]
    table = tmp_path / "labels.csv"
    rows[4][3] = "p0"  # p0's first row (line 2) is in train, this one (line 6) in val
    write_table(table, header, rows)
    with pytest.raises(DataError, match=r"line 6, column `split`: group 'p0' \(group\) is in the train split at "
                                        r"line 2, and here in val"):
        table_source(config(table, columns=columns))
    rows[4][3], rows[7][2] = "p4", "holdout"
    write_table(table, header, rows)
    with pytest.raises(DataError, match=r"line 9, column `split`: split 'holdout' is none of train, val"):
        table_source(config(table, columns=columns))
    rows[7][2] = "validation"  # negative control: Hugging Face's name for val is read as val
    write_table(table, header, rows)
    source = table_source(config(table, columns=columns))
    assert (len(source.train), len(source.val), len(source.test)) == (12, 10, 8)


def test_a_grouped_split_never_puts_a_group_in_two_splits(tmp_path, images):
    straddled = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        groups = [f"scene{g}" for g in rng.integers(0, 8, ROWS)]
        rows = [[*row, group] for row, group in zip(sample_rows(images), groups, strict=True)]
        table = tmp_path / f"groups{seed}.csv"
        write_table(table, ["path", "label", "group"], rows)
        group_of = {f"images/{name}": group for name, group in zip(images, groups, strict=True)}
        source = table_source(config(table, columns=TableColumns(group="group"), val_fraction=0.3,
                                     test_fraction=0.2))
        parts = [{group_of[rel] for rel in source.split[name] or []} for name in ("train", "val", "test")]
        assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2]), seed
        assert parts[0] and parts[1]
        plain = table_source(config(table, val_fraction=0.3, test_fraction=0.2))  # negative control: no group
        by_row = [{group_of[rel] for rel in plain.split[name] or []} for name in ("train", "val")]
        straddled += bool(by_row[0] & by_row[1])
    assert straddled > 10


def test_the_fingerprint_follows_the_tables_bytes_not_its_time(tmp_path, images):
    table = tmp_path / "labels.csv"
    write_table(table, ["path", "label"], sample_rows(images))
    first = table_source(config(table)).fingerprint
    copied = tmp_path / "copy" / "labels.csv"
    copied.parent.mkdir()
    shutil.copy(table, copied)  # a new mtime, the same bytes; the images under the copy's own folder
    shutil.copytree(tmp_path / "images", copied.parent / "images")
    assert table_source(config(copied)).fingerprint == first
    rows = sample_rows(images)
    rows[3][1] = "cat" if rows[3][1] != "cat" else "dog"
    write_table(table, ["path", "label"], rows)  # negative control: one label changed
    assert table_source(config(table)).fingerprint != first


def test_a_table_that_cannot_be_read_is_named_with_what_to_do(tmp_path):
    for name, text, message in [("a.xlsx", "x", "not a table this app reads"), ("e.csv", "", "is empty"),
                                ("n.csv", "path,label\n", "holds no rows"), ("e.jsonl", "\n", "holds no rows"),
                                ("b.jsonl", "[1, 2]\nnot json\n", "b.jsonl, line 1: it is not a JSON object")]:
        (tmp_path / name).write_text(text)
        with pytest.raises(DataError, match=message):
            table_source(config(tmp_path / name))
    (tmp_path / "c.csv").write_text("file,label\nx.png,a\n")
    with pytest.raises(DataError, match=r"no column `path` \(data.columns.path\): its columns are file, label"):
        table_source(config(tmp_path / "c.csv"))


def test_a_weight_column_gives_each_training_row_its_weight(tmp_path, images):
    rows = [[*row, str(i % 4)] for i, row in enumerate(sample_rows(images))]
    table = tmp_path / "labels.csv"
    write_table(table, ["path", "label", "w"], rows)
    source = table_source(config(table, columns=TableColumns(weight="w")))
    weight_of = {f"images/{name}": float(i % 4) for i, name in enumerate(images)}
    assert source.train_weights.tolist() == [weight_of[rel] for rel in source.split["train"]]
    assert table_source(config(table)).train_weights.tolist() == [1.0] * len(source.train)  # none given: all 1
    rows[2][2] = "-1"
    write_table(table, ["path", "label", "w"], rows)
    with pytest.raises(DataError, match=r"line 4, column `w`: weight '-1' is not a number of 0 or more"):
        table_source(config(table, columns=TableColumns(weight="w")))


def test_what_a_careless_table_holds_is_refused_by_name_not_misread(tmp_path, images):
    table = tmp_path / "t.csv"
    rows = "\n".join(f"images/{name},{'ab'[i % 2]}" for i, name in enumerate(images))
    table.write_text("path,label\n" + rows.replace("images/img04.png,a", 'images/img04.png,"a', 1) + "\n")
    with pytest.raises(DataError, match=r"t.csv, line 6: .*quoted whole"):  # not the rest of the file as one label
        table_source(config(table))
    table.write_text("path,label\nimages/img00.png,a\n./images/img00.png,b\n" + rows + "\n")
    with pytest.raises(DataError, match=r"line 3, column `path`: images/img00.png is listed already, at line 2"):
        table_source(config(table))
    table.write_text("path,label,label\n" + "\n".join(f"{r},x" for r in rows.splitlines()) + "\n")
    with pytest.raises(DataError, match=r"names column\(s\) `label` more than once"):
        table_source(config(table))
    table.write_text("id,label\n" + "\n".join(f"img{i:02d},{'ab'[i % 2]}" for i in range(ROWS)) + "\n")
    with pytest.raises(DataError, match=r"line 2, column `id`: .*img00\{x\}.png cannot be read"):  # no KeyError
        table_source(config(table, columns=TableColumns(path="id"), path_format="images/{}{x}.png"))
    split = tmp_path / "s.csv"
    write_table(split, ["path", "label", "split"], [[*row, "val" if row[1] == "owl" else "train"]
                                                    for row in sample_rows(images)])
    with pytest.raises(DataError, match="class\\(es\\) owl have no row in the training split"):
        table_source(config(split, columns=TableColumns(split="split")))
    assert table_source(config(table, columns=TableColumns(path="id"), path_format="images/{}.png")).class_names \
        == ["a", "b"]  # negative control: the same table read right


def test_labels_written_alike_are_one_class_and_a_nan_label_is_empty(tmp_path, images):
    rows = [[f"images/{name}", [1, 1.0, 2][i % 3]] for i, name in enumerate(images)]  # json writes 1 and 1.0
    table = tmp_path / "numbers.jsonl"
    write_table(table, ["path", "label"], rows)
    assert table_source(config(table)).class_names == ["1", "2"]
    rows[0][1] = 1.5  # negative control: a number of its own is a class of its own
    write_table(table, ["path", "label"], rows)
    assert table_source(config(table)).class_names == ["1", "1.5", "2"]
    accented = [[f"images/{name}", unicodedata.normalize("NFD" if i % 2 else "NFC", "Ménière") if i % 3 else "x"]
                for i, name in enumerate(images)]
    write_table(tmp_path / "accents.csv", ["path", "label"], accented)
    assert table_source(config(tmp_path / "accents.csv")).class_names == ["Ménière", "x"]
    for suffix in (".parquet", ".jsonl"):  # a float label column: pandas writes a missing value as NaN
        nan = [[f"images/{name}", float("nan") if i == 4 else float(i % 2)] for i, name in enumerate(images)]
        write_table(tmp_path / f"nan{suffix}", ["path", "label"], nan)
        with pytest.raises(DataError, match=r"(row|line) 5, column `label`: the label is empty"):
            table_source(config(tmp_path / f"nan{suffix}"))


def test_a_file_named_in_the_other_unicode_form_is_found(tmp_path):
    names = [unicodedata.normalize("NFD", f"é{i}.png") for i in range(6)]  # as macOS stores a name
    write_images(tmp_path / "images", names)
    table = tmp_path / "t.csv"
    write_table(table, ["path", "label"], [[f"images/é{i}.png", "ab"[i % 2]] for i in range(6)])  # typed: NFC
    source = table_source(config(table))
    assert sorted(source.split["train"] + source.split["val"]) == [f"images/{name}" for name in names]
    write_table(table, ["path", "label"], [[f"images/è{i}.png", "ab"[i % 2]] for i in range(6)])  # no such file
    with pytest.raises(DataError, match=r"line 2, column `path`: .*è0.png cannot be read"):
        table_source(config(table))


def test_one_file_under_two_spellings_is_listed_twice(tmp_path, images):
    (tmp_path / "linked").symlink_to(tmp_path / "images")
    for spelling in (str(tmp_path / "images" / "img00.png"), "linked/img00.png", "images/../images/img00.png"):
        rows = sample_rows(images)
        rows[5][0] = spelling
        write_table(tmp_path / "t.csv", ["path", "label"], rows)
        with pytest.raises(DataError, match=r"line 7, column `path`: .*img00.png is listed already, at line 2"):
            table_source(config(tmp_path / "t.csv"))
    rows = sample_rows(images)  # negative control: another file through the link is no duplicate
    rows[5][0] = "linked/img05.png"
    write_table(tmp_path / "t.csv", ["path", "label"], rows)
    assert len(table_source(config(tmp_path / "t.csv")).split["train"]) > ROWS / 2


def test_a_folder_named_by_a_row_is_refused_at_the_check(tmp_path, images):
    (tmp_path / "images" / "sub.png").mkdir()
    rows = sample_rows(images)
    rows[3][0] = "images/sub.png"
    write_table(tmp_path / "t.csv", ["path", "label"], rows)
    with pytest.raises(DataError, match=r"line 5, column `path`: .*sub.png is a folder, not an image file"):
        table_source(config(tmp_path / "t.csv"))


def test_a_semicolon_table_and_excels_sep_line_are_read_by_their_separator(tmp_path, images, caplog):
    rows = sample_rows(images)
    write_table(tmp_path / "comma.csv", ["path", "label"], rows)
    expected = summary(table_source(config(tmp_path / "comma.csv")))
    with open(tmp_path / "excel.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f, delimiter=";").writerows([["path", "label"], *rows])
    with open(tmp_path / "declared.csv", "w", newline="", encoding="utf-8") as f:
        f.write("sep=|\r\n")
        csv.writer(f, delimiter="|").writerows([["path", "label"], *rows])
    caplog.set_level("INFO", logger="app.data.sources.table_files")
    for name in ("excel.csv", "declared.csv"):
        assert summary(table_source(config(tmp_path / name))) == expected, name
    assert "separated by ';'" in caplog.text and "as its first line (sep=) declares" in caplog.text
    rows[2][1] = ""  # a fault keeps its line: the sep= line counts
    with open(tmp_path / "declared.csv", "w", newline="", encoding="utf-8") as f:
        f.write("sep=,\r\n")
        csv.writer(f).writerows([["path", "label"], *rows])
    with pytest.raises(DataError, match=r"declared.csv, line 5, column `label`: the label is empty"):
        table_source(config(tmp_path / "declared.csv"))


def test_a_grouped_split_says_what_its_groups_allow(tmp_path, images, caplog):
    rows = [[*row, "big" if i < 26 else f"p{i}"] for i, row in enumerate(sample_rows(images))]
    write_table(tmp_path / "t.csv", ["path", "label", "group"], rows)
    source = table_source(config(tmp_path / "t.csv", columns=TableColumns(group="group"), val_fraction=0.2))
    assert re.search(rf"the val split holds {len(source.val)} of the 30 rows \(\d of the 5 groups; "
                     r"data.val_fraction=0.2 asked\).*the largest group, 'big', holds 26 rows", caplog.text)
    caplog.clear()  # negative control: groups of 2 allow a fair split, and nothing is said
    rows = [[*row, f"p{i // 2}"] for i, row in enumerate(sample_rows(images))]
    write_table(tmp_path / "t.csv", ["path", "label", "group"], rows)
    table_source(config(tmp_path / "t.csv", columns=TableColumns(group="group"), val_fraction=0.2))
    assert "largest group" not in caplog.text


def test_one_file_is_known_by_its_identity_on_disk_not_its_name(tmp_path, images):
    (tmp_path / "images" / "hard00.png").hardlink_to(tmp_path / "images" / "img00.png")
    rows = sample_rows(images)
    rows[5][0] = "images/hard00.png"
    write_table(tmp_path / "t.csv", ["path", "label"], rows)
    with pytest.raises(DataError, match=r"line 7, column `path`: images/hard00.png is listed already, at line 2 "
                                        r"\(as images/img00.png\)"):
        table_source(config(tmp_path / "t.csv"))
    shutil.copy(tmp_path / "images" / "img00.png", tmp_path / "images" / "copy00.png")
    rows[5][0] = "images/copy00.png"  # negative control: a copy is a file of its own
    write_table(tmp_path / "t.csv", ["path", "label"], rows)
    assert "images/copy00.png" in summary(table_source(config(tmp_path / "t.csv")))


def test_a_slides_hard_linked_alias_is_one_image_so_its_patches_go_to_one_split(tmp_path):
    names = [f"slide{i}.png" for i in range(8)]
    write_images(tmp_path / "dots", names)
    for i in range(8):
        (tmp_path / "dots" / f"alias{i}.png").hardlink_to(tmp_path / "dots" / f"slide{i}.png")
    rows = [[f"dots/{stem}{i}.png", "ab"[i % 2], 8 * k + (4 if stem == "alias" else 0), 0]
            for i in range(8) for stem in ("slide", "alias") for k in range(2)]
    write_table(tmp_path / "t.csv", ["path", "label", "x", "y"], rows)
    source = table_source(config(tmp_path / "t.csv", columns=TableColumns(x="x", y="y"), val_fraction=0.25))
    ids = [{(tmp_path / p).stat().st_ino for p in source.split[name]} for name in ("train", "val")]
    assert ids[0] and ids[1] and not ids[0] & ids[1]
    assert {p.split("/")[1][:5] for p in source.split["val"]} == {"slide", "alias"}  # both names, one split
    copy = tmp_path / "dots" / "alias0.png"  # negative control: a copy is an image of its own, split on its own
    copy.unlink()
    shutil.copy(tmp_path / "dots" / "slide0.png", copy)
    source = table_source(config(tmp_path / "t.csv", columns=TableColumns(x="x", y="y"), val_fraction=0.25))
    assert len(source.split["train"]) + len(source.split["val"]) == 32


def test_a_dot_dot_after_a_linked_folder_leads_where_the_os_reads(tmp_path):
    write_images(tmp_path / "sub" / "inner", ["x.png"])
    write_images(tmp_path / "sub" / "img2", ["000.png"] + [f"s{i}.png" for i in range(4)])
    write_images(tmp_path / "img2", ["000.png"] + [f"t{i}.png" for i in range(4)])
    (tmp_path / "deep").symlink_to("sub/inner", target_is_directory=True)
    rows = [["deep/../img2/000.png", "a"], ["img2/000.png", "b"]] + \
        [[f"sub/img2/s{i}.png", "a"] for i in range(4)] + [[f"img2/t{i}.png", "b"] for i in range(4)]
    write_table(tmp_path / "t.csv", ["path", "label"], rows)
    source = table_source(config(tmp_path / "t.csv"))  # two files: neither listed already
    paths = source.train.paths + source.val.paths
    deep = next(p for p in paths if "deep" in p)
    assert (tmp_path / deep).samefile(tmp_path / "sub" / "img2" / "000.png")
    assert any(Path(p).samefile(tmp_path / "img2" / "000.png") for p in paths)
    rows.append(["./sub//img2/000.png", "a"])  # negative control: the same file by another spelling, refused
    write_table(tmp_path / "t.csv", ["path", "label"], rows)
    with pytest.raises(DataError, match=r"line 12, column `path`: sub/img2/000.png is listed already, at line 2 "
                                        r"\(as deep/../img2/000.png\)"):
        table_source(config(tmp_path / "t.csv"))


def test_two_files_whose_names_differ_only_in_unicode_form_are_two(tmp_path):
    forms = [unicodedata.normalize(form, "café") for form in ("NFC", "NFD")]
    write_images(tmp_path / "images", [f"{name}{i}.png" for name in forms for i in range(4)])
    if len(list((tmp_path / "images").iterdir())) < 8:
        pytest.skip("this file system keeps one name for both forms")
    rows = [[f"images/{name}{i}.png", "ab"[i % 2]] for name in forms for i in range(4)]
    write_table(tmp_path / "t.csv", ["path", "label"], rows)
    source = table_source(config(tmp_path / "t.csv"))
    assert sorted(source.split["train"] + source.split["val"]) == sorted(row[0] for row in rows)
    rows.append([f"images/{forms[1]}0.png", "a"])  # negative control: the same name, the same form, twice
    write_table(tmp_path / "t.csv", ["path", "label"], rows)
    with pytest.raises(DataError, match=r"line 10, column `path`: .*0.png is listed already, at line 6"):
        table_source(config(tmp_path / "t.csv"))


@pytest.mark.parametrize("label", ["c\0at", "cat\u200b", "c\u00a0at", "c\u2028at"], ids=["nul", "zero-width", "nbsp",
                                                                                        "line-separator"])
def test_a_label_holding_a_character_that_prints_as_another_is_refused_by_row_and_column(tmp_path, images, label):
    rows = [[f"images/{name}", ["cat", "dog", "c at"][i % 3]] for i, name in enumerate(images)]
    write_table(tmp_path / "t.csv", ["path", "label"], rows)
    assert table_source(config(tmp_path / "t.csv")).class_names == ["c at", "cat", "dog"]  # negative control
    rows[3][1] = label
    for suffix, line in ((".csv", 5), (".jsonl", 4)):  # JSON Lines: no header line
        write_table(tmp_path / f"t{suffix}", ["path", "label"], rows)
        with pytest.raises(DataError, match=rf"t{suffix}, line {line}, column `label`: label .* holds the character"):
            table_source(config(tmp_path / f"t{suffix}"))
    several = tmp_path / "several.csv"
    write_table(several, ["path", "label"], [[path, f"dog|{label}" if i == 3 else name] for i, (path, name) in
                                             enumerate(rows)])
    with pytest.raises(DataError, match=r"several.csv, line 5, column `label`: label .* holds the character U\+"):
        table_source(config(several, task=Task.multilabel, label_separator="|"))


@pytest.mark.parametrize("table", ["s3://bucket/t.parquet", "https://example.org/t.csv"])
def test_a_table_at_a_url_is_refused_as_one_never_read_as_a_local_path(tmp_path, table):
    with pytest.raises(DataError, match=rf"data.table={re.escape(table)} is a URL: a table and the images it lists are "
                                        "read from local files"):
        table_source(config(table))
    with pytest.raises(DataError, match=r"data.root=s3://bucket/images is a URL"):
        table_source(config(tmp_path / "t.csv", root="s3://bucket/images"))
    with pytest.raises(DataError, match=r"data.table .*t.csv does not exist"):  # negative control: a local path
        table_source(config(tmp_path / "t.csv"))
