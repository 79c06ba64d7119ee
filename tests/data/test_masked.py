"""app/data/masked.py, app/data/sources/masked_folder.py and data=table's mask column (data.task=segmentation) on real
files Pillow and tifffile write: each pair read, each refusal named, each layout split, the fingerprint's cover."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest
import tifffile
from omegaconf import OmegaConf
from PIL import Image
from segmentation_data import IGNORE, PALETTE, TEXTURE_CLASSES, write_palette_png, write_texture_folder

from app.data.masked import MaskedFileSplit, MaskRule
from app.data.pixels.label_masks import read_mask
from app.data.source import FileSplit
from app.data.sources.chosen import load_or_generate_source
from app.data.sources.masked_folder import masked_folder_source
from app.data.sources.table import table_source
from app.errors import BadSampleError, DataError
from app.schema import OnBadSample, TableColumns, TableDataConfig, Task
from app.schema.data import FolderDataConfig

CLASSES = ["background", "stroma", "tumour"]
SHAPE = (5, 7)  # (H, W), not square: a mask read across would show


def rgb(path: Path, shape=SHAPE, seed: int = 0) -> np.ndarray:
    pixels = np.random.default_rng(seed).integers(0, 256, (*shape, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)
    return pixels


def indices(shape=SHAPE, high: int = 2) -> np.ndarray:
    return (np.arange(np.prod(shape)).reshape(shape) * 5 % (high + 1)).astype(np.uint8)


def pair(tmp_path, mask: np.ndarray, rule=MaskRule(3, IGNORE), name: str = "m.png") -> MaskedFileSplit:
    """A one-sample split: an RGB PNG of SHAPE and `mask` as a palette PNG (a TIFF for a .tif name)."""
    rgb(tmp_path / "a.png")
    if name.endswith(".tif"):
        tifffile.imwrite(tmp_path / name, mask, photometric="minisblack")
    else:
        write_palette_png(tmp_path / name, mask)
    return MaskedFileSplit([tmp_path / "a.png"], [str(tmp_path / name)], rule)


def refusal(split: MaskedFileSplit, i: int = 0) -> str:
    with pytest.raises(BadSampleError) as caught:
        split.read(i)
    assert caught.value.index == i
    return str(caught.value)


# -- MaskedFileSplit ---------------------------------------------------------------------------------------------


def test_a_pair_reads_as_the_image_and_the_masks_indices_never_its_palette_colours(tmp_path):
    mask = indices()
    mask[0, 0] = IGNORE
    split = pair(tmp_path, mask)
    image, read = split.read(0)
    assert np.array_equal(image, np.asarray(Image.open(tmp_path / "a.png"))) and image.shape == (*SHAPE, 3)
    assert read.dtype == np.uint8 and np.array_equal(read, mask)
    image2, read2 = split.decode(0, split.fetch(0))  # the worker's two steps, the same pair
    assert np.array_equal(image2, image) and np.array_equal(read2, read)
    # negative control: the palette's colours are not the indices (a reader of colours would differ)
    with Image.open(tmp_path / "m.png") as img:
        assert img.mode == "P" and not np.array_equal(np.asarray(img.convert("L")), mask)
    assert PALETTE[1] != (1, 1, 1)
    assert len(split) == 1 and split.labels.tolist() == [0] and split.mask_dtype == "uint8"


def test_a_mask_of_another_size_is_refused_naming_both_sizes(tmp_path):
    split = pair(tmp_path, indices((6, 7)))
    said = refusal(split)
    assert f"sample 0 ({tmp_path / 'a.png'})" in said
    assert f"its mask {tmp_path / 'm.png'} is 7×6 (width×height) where the image is 7×5" in said
    # a mask across (its rows the image's columns) is another size too
    assert "is 5×7 (width×height) where the image is 7×5" in refusal(pair(tmp_path, indices((7, 5)), name="t.png"))
    assert pair(tmp_path, indices(SHAPE), name="ok.png").read(0)[1].shape == SHAPE  # negative control: same size


def test_a_value_neither_a_class_nor_the_ignore_index_is_refused_naming_file_value_and_place(tmp_path):
    mask = indices()
    mask[2, 3], mask[4, 6] = 3, IGNORE  # 3: one past the last class
    said = refusal(pair(tmp_path, mask))
    assert f"sample 0 ({tmp_path / 'a.png'})" in said and f"its mask {tmp_path / 'm.png'}: value 3" in said
    assert "value 3 at row 2, column 3 is neither one of the 3 classes (0..2) nor data.ignore_index 255" in said
    mask[2, 3] = 2  # negative control: the last class and the ignore index pass
    assert np.array_equal(pair(tmp_path, mask, name="ok.png").read(0)[1], mask)
    # without an ignore index, 255 is a wrong value like any other
    said = refusal(pair(tmp_path, mask, MaskRule(3), name="no-ignore.png"))
    assert "value 255 at row 4, column 6 is not one of the 3 classes (0..2), and no data.ignore_index is set" in said


def test_a_missing_mask_is_a_bad_sample_naming_the_image_and_the_file_looked_for(tmp_path):
    rgb(tmp_path / "a.png")
    write_palette_png(tmp_path / "b-mask.png", indices())
    rgb(tmp_path / "b.png", seed=1)
    split = MaskedFileSplit([tmp_path / "a.png", tmp_path / "b.png"],
                            [f"{tmp_path / 'masks' / 'a'}.*", str(tmp_path / "b-mask.png")], MaskRule(3))
    said = refusal(split, 0)
    assert said == (f"sample 0 ({tmp_path / 'a.png'}) could not be loaded: it has no mask: no file "
                    f"{tmp_path / 'masks' / 'a'}.*")
    assert np.array_equal(split.read(1)[1], indices())  # negative control: its neighbour, with its mask, reads


@pytest.mark.parametrize(("rule", "dtype"), [
    (MaskRule(3), "uint8"), (MaskRule(256), "uint8"), (MaskRule(3, 255), "uint8"),  # 255 the largest value
    (MaskRule(257), "uint16"), (MaskRule(300), "uint16"), (MaskRule(3, 256), "uint16"), (MaskRule(3, 1000), "uint16"),
])
def test_the_mask_type_is_uint8_until_a_class_or_the_ignore_index_passes_255(rule, dtype):
    assert rule.dtype == dtype


def test_a_uint16_tiff_mask_of_300_classes_reads_its_values_past_255(tmp_path):
    mask = indices().astype(np.uint16) * 149  # 0, 149, 298
    split = pair(tmp_path, mask, MaskRule(300), name="m.tif")
    assert split.mask_dtype == "uint16"
    read = split.read(0)[1]
    assert read.dtype == np.uint16 and np.array_equal(read, mask) and read.max() == 298
    # negative control: one class fewer, and 298 is no class
    assert "value 298 at row" in refusal(MaskedFileSplit(split.paths, split.masks, MaskRule(298)))


def test_take_keeps_each_images_mask_and_the_rule(tmp_path):
    paths, masks = [], []
    for i in range(3):
        paths.append(tmp_path / f"{i}.png")
        rgb(paths[-1], seed=i)
        masks.append(str(tmp_path / f"{i}-mask.png"))
        write_palette_png(Path(masks[-1]), np.full(SHAPE, i, np.uint8))
    split = MaskedFileSplit(paths, masks, MaskRule(300, 1000))
    taken = split.take(np.array([2, 0]))
    assert isinstance(taken, MaskedFileSplit) and taken.rule == split.rule and taken.mask_dtype == "uint16"
    assert taken.paths == [str(paths[2]), str(paths[0])] and taken.masks == [masks[2], masks[0]]
    assert [int(taken.read(k)[1][0, 0]) for k in range(2)] == [2, 0]
    assert np.array_equal(taken.read(0)[0], split.read(2)[0])
    with pytest.raises(ValueError, match="2 masks for 3 images"):  # negative control: a mask short
        MaskedFileSplit(paths, masks[:2], MaskRule(3))


# -- data=folder, data.task=segmentation -------------------------------------------------------------------------


def folder_cfg(made, **values):
    return OmegaConf.structured(FolderDataConfig(path=str(made.root / "images"), masks=str(made.root / "masks"),
                                                 task=Task.segmentation, classes=list(made.class_names),
                                                 ignore_index=IGNORE, **values))


def masks_of(made) -> dict[str, np.ndarray]:
    """Each image's path → its mask as written."""
    return {str(image): read_mask(mask, None) for image, mask, _ in made.samples}


def assert_pairs(split: MaskedFileSplit, written: dict[str, np.ndarray]) -> None:
    for i in range(len(split)):
        image, mask = split.read(i)
        assert np.array_equal(mask, written[split.describe(i)]), split.describe(i)
        assert np.array_equal(image, np.asarray(Image.open(split.describe(i))))


def test_the_flat_layout_is_split_by_val_fraction_each_image_with_its_mask_of_any_extension(tmp_path):
    made = write_texture_folder(tmp_path, train=6, val=2, size=16, layout="flat")
    # one mask kept as a TIFF: found by its stem
    written = masks_of(made)
    image, mask, _ = made.samples[3]
    tifffile.imwrite(mask.with_suffix(".tif"), written[str(image)], photometric="minisblack")
    mask.unlink()
    src = masked_folder_source(folder_cfg(made, val_fraction=0.25))
    names = sorted(p.name for p, _, _ in made.samples)
    assert sorted(src.split["train"] + src.split["val"]) == names and len(src.split["val"]) == 2
    assert not set(src.split["train"]) & set(src.split["val"])
    assert src.split["val_fraction"] == 0.25 and src.class_names == made.class_names
    assert isinstance(src.train, MaskedFileSplit) and isinstance(src.val, MaskedFileSplit) and src.test is None
    assert src.train.rule == MaskRule(3, IGNORE, tuple(TEXTURE_CLASSES))
    every = src.train.masks + src.val.masks
    assert str(mask.with_suffix(".tif")) in every and str(mask) not in every
    assert_pairs(src.train, written)
    assert_pairs(src.val, written)


def test_the_split_layout_takes_train_val_and_test_from_the_folders(tmp_path):
    made = write_texture_folder(tmp_path, train=4, val=2, size=16, layout="split")
    src = masked_folder_source(folder_cfg(made))
    assert src.split["train"] == [f"train/train-{i:03d}.png" for i in range(4)]
    assert src.split["val"] == ["val/val-000.png", "val/val-001.png"] and src.split["val_fraction"] is None
    assert src.test is None
    assert src.train.masks == [str(made.root / "masks" / "train" / f"train-{i:03d}.png") for i in range(4)]
    assert_pairs(src.train, masks_of(made))
    assert_pairs(src.val, masks_of(made))
    # negative control: a test/ folder is a third split, its masks under masks/test/
    rgb(made.root / "images" / "test" / "t.png", (16, 16))
    (made.root / "masks" / "test").mkdir()
    write_palette_png(made.root / "masks" / "test" / "t.png", np.ones((16, 16), np.uint8))
    src = masked_folder_source(folder_cfg(made))
    assert src.split["test"] == ["test/t.png"] and len(src.test) == 1
    assert np.array_equal(src.test.read(0)[1], np.ones((16, 16), np.uint8))


def test_a_missing_mask_leaves_the_source_whole_and_its_read_names_the_image_and_the_pattern(tmp_path):
    made = write_texture_folder(tmp_path, train=6, val=2, size=16, layout="flat")
    image, mask, _ = made.samples[2]
    mask.unlink()
    src = masked_folder_source(folder_cfg(made, val_fraction=0.25))
    split = src.train if image.name in src.split["train"] else src.val
    i = split.paths.index(str(image))
    assert split.masks[i] == f"{made.root / 'masks' / image.stem}.*"
    said = refusal(split, i)
    assert str(image) in said and f"it has no mask: no file {made.root / 'masks' / image.stem}.*" in said
    # negative control: every other image of the split reads with its mask
    assert all(split.read(k)[1].shape == (16, 16) for k in range(len(split)) if k != i)


def test_two_masks_of_one_stem_are_refused_naming_both(tmp_path):
    made = write_texture_folder(tmp_path, train=3, val=1, size=16, layout="flat")
    cfg = folder_cfg(made, val_fraction=0.25)
    masked_folder_source(cfg)  # negative control: one mask an image
    _, mask, _ = made.samples[1]
    tifffile.imwrite(mask.with_suffix(".tif"), read_mask(mask, None), photometric="minisblack")
    with pytest.raises(DataError) as refused:
        masked_folder_source(cfg)
    said = str(refused.value)
    assert str(mask) in said and str(mask.with_suffix(".tif")) in said and "two masks of one image" in said


def test_the_fingerprint_covers_the_masks_size_and_time(tmp_path):
    made = write_texture_folder(tmp_path, train=3, val=1, size=16, layout="flat")
    cfg = folder_cfg(made, val_fraction=0.25)

    def prints() -> tuple[str, str]:
        src = masked_folder_source(cfg)
        assert src.split["fingerprint"] == src.fingerprint
        return src.fingerprint, src.names_sizes_fingerprint

    first = prints()
    assert prints() == first  # negative control: nothing changed, nothing seen
    (made.root / "masks" / "orphan.png").write_bytes(made.samples[0][1].read_bytes())
    assert prints() == first  # a mask no image has is none of the data's
    _, mask, _ = made.samples[1]
    write_palette_png(mask, np.ones((16, 16), np.uint8))  # another size: all one class compresses smaller
    resized = prints()
    assert resized[0] != first[0] and resized[1] != first[1]
    stat = mask.stat()
    os.utime(mask, (stat.st_atime, stat.st_mtime + 10))  # the same size, later
    touched = prints()
    assert touched[0] != resized[0] and touched[1] == resized[1]


def test_a_masks_folder_inside_the_images_folder_is_never_taken_for_images(tmp_path):
    (tmp_path / "data" / "masks").mkdir(parents=True)
    for i in range(5):
        rgb(tmp_path / "data" / f"{i}.png", seed=i)
        write_palette_png(tmp_path / "data" / "masks" / f"{i}.png", indices())
    cfg = OmegaConf.structured(FolderDataConfig(path=str(tmp_path / "data"), masks=str(tmp_path / "data" / "masks"),
                                                task=Task.segmentation, classes=list(CLASSES)))
    try:
        src = masked_folder_source(cfg)
    except DataError as refused:  # a fix that refuses the layout names data.masks
        assert "data.masks" in str(refused) and str(tmp_path / "data" / "masks") in str(refused)
        return
    listed = src.split["train"] + src.split["val"]
    assert sorted(listed) == [f"{i}.png" for i in range(5)], listed


def test_load_or_generate_source_takes_a_folder_with_masks_for_segmentation(tmp_path):
    made = write_texture_folder(tmp_path, train=3, val=1, size=16, layout="split")
    src = load_or_generate_source(folder_cfg(made))
    assert isinstance(src.train, MaskedFileSplit) and src.split["masks"] == str(made.root / "masks")


# -- data=table, data.columns.mask -------------------------------------------------------------------------------

ROWS = 8


def write_table(tmp_path, *, rows: int = ROWS) -> tuple[Path, dict[str, np.ndarray]]:
    """images/<i>.png, labels/<i>.png (grey) and t.csv of `path,seg`: no label column; each image's path → mask."""
    written, lines = {}, []
    for i in range(rows):
        rgb(tmp_path / "images" / f"{i}.png", seed=i)
        mask = ((indices() + i) % 3).astype(np.uint8)
        (tmp_path / "labels").mkdir(exist_ok=True)
        Image.fromarray(mask).save(tmp_path / "labels" / f"{i}.png")
        written[str(tmp_path / "images" / f"{i}.png")] = mask
        lines.append([f"images/{i}.png", f"labels/{i}.png"])
    with open(tmp_path / "t.csv", "w", newline="") as file:
        csv.writer(file).writerows([["path", "seg"], *lines])
    return tmp_path / "t.csv", written


def table_cfg(table, **values) -> TableDataConfig:
    return OmegaConf.structured(TableDataConfig(table=str(table), task=Task.segmentation, classes=list(CLASSES),
                                                columns=TableColumns(mask="seg"), **values))


def test_a_tables_mask_column_gives_each_row_its_mask(tmp_path):
    table, written = write_table(tmp_path)
    src = table_source(table_cfg(table))
    assert isinstance(src.train, MaskedFileSplit) and isinstance(src.val, MaskedFileSplit)
    assert len(src.train) + len(src.val) == ROWS and len(src.val) > 0 and src.class_names == CLASSES
    assert src.train.rule == MaskRule(3, None, tuple(CLASSES)) and src.train.mask_dtype == "uint8"
    assert_pairs(src.train, written)
    assert_pairs(src.val, written)
    again = table_source(table_cfg(table))
    assert again.fingerprint == src.fingerprint  # negative control: nothing changed
    Image.fromarray(np.zeros(SHAPE, np.uint8)).save(tmp_path / "labels" / "5.png")  # another size of mask
    assert table_source(table_cfg(table)).fingerprint != src.fingerprint


def test_a_rows_missing_mask_is_refused_naming_its_column_or_left_out_with_skip(tmp_path):
    table, _ = write_table(tmp_path)
    (tmp_path / "labels" / "3.png").unlink()
    with pytest.raises(DataError) as refused:
        table_source(table_cfg(table))
    said = str(refused.value)
    assert f"{table}, line 5, column `seg`: the image's mask {tmp_path / 'labels' / '3.png'} cannot be read" in said
    skipped = table_source(table_cfg(table, on_bad_sample=OnBadSample.skip, max_bad_fraction=0.2))
    every = skipped.train.paths + skipped.val.paths
    assert len(every) == ROWS - 1 and str(tmp_path / "images" / "3.png") not in every
    assert skipped.split["left_out"] == [5]


def test_a_classifiers_table_of_the_same_images_reads_labels_not_masks(tmp_path):
    """The negative control of the two above: without data.task=segmentation, no mask is looked for."""
    write_table(tmp_path)
    with open(tmp_path / "labelled.csv", "w", newline="") as file:
        csv.writer(file).writerows([["path", "label"], *[[f"images/{i}.png", CLASSES[i % 3]] for i in range(ROWS)]])
    (tmp_path / "labels" / "3.png").unlink()
    src = table_source(OmegaConf.structured(TableDataConfig(table=str(tmp_path / "labelled.csv"))))
    assert type(src.train) is FileSplit and src.train.mask_dtype is None
