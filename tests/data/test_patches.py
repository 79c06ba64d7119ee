"""Patches of large images: regions read bit-exactly from a pyramid's level through zarr, the level a resolution asks,
the foreground mask against the drawn tissue, grid and random patches, and files refused before any read."""

import dataclasses
import logging
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
import tifffile
from forged import png_declaring
from omegaconf import OmegaConf
from PIL import Image
from slides import GLASS, he_pixels, slide_pixels, write_slide, zero_tiles

from app.data.pixels.decode import DecodeError
from app.data.pixels.images import read_bytes
from app.data.slides import masks
from app.data.slides.layouts import why_none
from app.data.slides.masks import foreground, fractions, thumbnail
from app.data.slides.patches import GridPatches, RandomPatches, grid_split, layout_of, patched
from app.data.slides.regions import close_open_files, read_region, slide_of
from app.data.source import FileSplit, Source
from app.data.sources.chosen import load_or_generate_source
from app.data.sources.folder import folder_source
from app.errors import DataError
from app.inference import patch_scores
from app.inference.patch_scores import aggregate, write_heatmap, write_patch_sheet
from app.schema.data import FolderDataConfig, PatchesConfig, TableColumns, TableDataConfig

LIMIT = 16_777_216


def settings(**given) -> SimpleNamespace:
    defaults = {"size": [64, 64], "level": None, "downsample": None, "mpp": None,
                "mode": SimpleNamespace(value="random"),
                "stride": None, "per_image": 4, "min_foreground": 0.5, "mask_bands": None, "max_chunk_pixels": LIMIT,
                "chunk_cache_mib": 64,
                "reader": SimpleNamespace(value="auto")}
    return SimpleNamespace(**{**defaults, **given})


@pytest.fixture(scope="module")
def slide(tmp_path_factory) -> tuple[Path, np.ndarray, np.ndarray]:
    """A 1024² JPEG-tiled slide of three levels at 0.25 µm a pixel, its pixels and its drawn tissue."""
    image, mask = slide_pixels(1024, 0, np.random.default_rng(1))
    path = tmp_path_factory.mktemp("slide") / "slide.tif"
    write_slide(path, image, levels=3, tile=128, mpp=0.25)
    return path, image, mask


def test_a_region_of_each_level_is_the_full_decode_of_that_level_there(slide):
    path = slide[0]
    found = slide_of(path, LIMIT)
    assert found.levels == ((1024, 1024), (512, 512), (256, 256)) and found.chunk == (128, 128)
    assert found.mpp == pytest.approx(0.25) and found.bands == 3
    series = tifffile.TiffFile(path).series[0]
    for level in range(3):
        whole = series.levels[level].asarray()
        region = read_region(found, level, (37, 101), (70, 90))
        assert np.array_equal(region, whole[37:107, 101:191])
        assert not np.array_equal(region, whole[38:108, 101:191])  # negative control: one row off


def test_the_resolution_picks_the_nearest_finer_level_and_shrinks_the_rest(slide):
    path = str(slide[0])
    assert layout_of(path, settings(level=1), grid=True).level == 1
    by_mpp = layout_of(path, settings(mpp=1.0), grid=True)  # 4× level 0's 0.25 µm: level 2 exactly
    assert (by_mpp.level, by_mpp.read, by_mpp.extent) == (2, (64, 64), (256, 256))
    between = layout_of(path, settings(downsample=3.0), grid=True)  # level 1 (2×) read, shrunk 1.5×
    assert (between.level, between.read, between.extent) == (1, (96, 96), (192, 192))
    with pytest.raises(DataError, match="data.patches.level=5: .* has levels 0 to 2"):
        layout_of(path, settings(level=5), grid=True)
    with pytest.raises(DataError, match=r"data.patches.mpp=0.125 is finer than .*slide.tif's level 0, at 0.25 µm"):
        layout_of(path, settings(mpp=0.125), grid=True)  # as a downsample under 1 is refused
    assert layout_of(path, settings(mpp=0.2499), grid=True).level == 0  # negative control: level 0's, rounded


def test_the_mask_finds_the_drawn_tissue(slide):
    path, _, drawn = slide
    thumb, cell = thumbnail(slide_of(path, LIMIT), 16)
    assert thumb.shape == (64, 64, 3) and cell == 16  # level 2 (4×), every fourth pixel
    mask = foreground(thumb)
    truth = drawn[::16, ::16]
    assert (mask & truth).sum() / (mask | truth).sum() > 0.8
    assert fractions(truth, 16, (64, 64), (np.array([0]), np.array([0]))).shape == (1, 1)


def test_no_data_is_background_and_a_flat_image_all_foreground():
    thumb = np.full((20, 20, 4), 500, np.uint16)
    thumb[:, :5] = 0
    mask = foreground(thumb, nodata=0.0)
    assert not mask[:, :5].any() and mask[:, 5:].all()
    assert foreground(thumb).all()  # negative control: without no-data, the zeros are foreground too


def test_grid_patches_lie_inside_the_image_on_foreground_and_random_ones_follow_the_draw(slide):
    path, _, drawn = slide
    images = FileSplit([str(path)], [0])
    grid = GridPatches(images, [layout_of(str(path), settings(level=0), grid=True)], settings(level=0))
    corners = [grid.where(i)[1:] for i in range(len(grid))]
    assert corners and all(0 <= top <= 1024 - 64 and 0 <= left <= 1024 - 64 for top, left in corners)
    shares = [drawn[top:top + 64, left:left + 64].mean() for top, left in corners]
    assert np.mean(np.array(shares) < 0.25) <= 0.05  # ≤ 5 % of them on glass, against the drawn tissue
    every = layout_of(str(path), settings(level=0, min_foreground=0.0), grid=True)
    assert len(every.cells()) == 16 * 16 > len(corners)  # negative control: without the mask, the whole grid
    assert np.array_equal(grid.read(0), read_region(slide_of(path, LIMIT), 0, corners[0], (64, 64)))
    drawn_split = RandomPatches(images, [layout_of(str(path), settings(level=0), grid=False)], settings(level=0))
    assert drawn_split.where(1, (0, 3, 0)) == drawn_split.where(1, (0, 3, 0))
    places = {drawn_split.where(i, (0, epoch, 0)) for i in range(4) for epoch in range(5)}
    assert len(places) > 10  # each epoch, each index, its own patch


def test_a_split_of_images_becomes_patches_by_image(slide, tmp_path):
    path = str(slide[0])
    blank = tmp_path / "glass.tif"
    write_slide(blank, np.full((512, 512, 3), 236, np.uint8), levels=2, tile=128)
    source = Source(name="folder", class_names=["a", "b"], train=FileSplit([path, str(blank)], [0, 1]),
                    val=FileSplit([path], [0]), fingerprint="f", split={"source": "folder"})
    made = patched(source, settings(level=0))
    assert len(made.train) == 4 and list(made.train.labels) == [0] * 4  # the glass has no patch: left out
    assert made.split["patches"]["split_by"] == "image" and made.split["patches"]["without_foreground"] == [str(blank)]
    assert made.split["patches"]["val"]["patches"] == len(made.val) > 4
    only_glass = Source(name="folder", class_names=["a"], train=FileSplit([str(blank)], [0]),
                        val=FileSplit([path], [0]), fingerprint="f", split={})
    with pytest.raises(DataError, match="the training split has no patch"):
        patched(only_glass, settings(level=0))


def test_a_file_in_one_strip_or_a_huge_png_is_refused_naming_how_to_tile_it(tmp_path):
    strip = tmp_path / "strip.tif"
    tifffile.imwrite(strip, np.zeros((600, 600, 3), np.uint8), rowsperstrip=600)
    with pytest.raises(DecodeError, match="stored in strips of 600×600 .*vips tiffsave"):
        slide_of(strip, 100_000)
    assert slide_of(strip, LIMIT).chunk == (600, 600)  # negative control: within the limit
    png = tmp_path / "huge.png"
    png_declaring(png, 30_000, 30_000)
    with pytest.raises(DataError, match="huge.png cannot be read as patches: .*30000×30000.*vips tiffsave"):
        layout_of(str(png), settings(), grid=True)
    with pytest.raises(DecodeError, match="it declares 900 M pixels, above"):  # without patches: the bomb guard
        read_bytes(png)
    small = tmp_path / "small.png"
    Image.fromarray(np.full((300, 300, 3), 90, np.uint8)).save(small)
    assert slide_of(small, LIMIT).levels == ((300, 300),)


def test_a_tables_rows_can_be_patches_labelled_on_their_own(tmp_path):
    """data.columns.x and y: a row a patch (its corner at level 0) with its own label; an image's rows stay in one
    split; a patch past its image's edge is refused naming it."""
    rng = np.random.default_rng(2)
    rows = ["path,label,x,y"]
    for i in range(4):
        image, _ = slide_pixels(256, i % 2, rng)
        write_slide(tmp_path / f"s{i}.tif", image, levels=2, tile=128)
        rows += [f"s{i}.tif,{'tissue' if k % 2 else 'glass'},{32 * k},{16 * k}" for k in range(6)]
    (tmp_path / "patches.csv").write_text("\n".join(rows) + "\n")
    data = OmegaConf.structured(TableDataConfig(table=str(tmp_path / "patches.csv"), val_fraction=0.5,
                                                columns=TableColumns(x="x", y="y"),
                                                patches=PatchesConfig(size=[32, 32], level=0)))
    source = load_or_generate_source(data)
    train, val = source.train, source.val
    assert len(train) + len(val) == 24 and {len(train), len(val)} == {12}
    assert not {Path(p).name for p in train.images.paths} & {Path(p).name for p in val.images.paths}
    assert [train.where(i)[1:] for i in range(6)] == [(16 * k, 32 * k) for k in range(6)]
    assert list(train.labels[:6]) == [source.class_names.index(n) for n in ["glass", "tissue"] * 3]
    image = tifffile.imread(train.images.paths[0])
    assert np.array_equal(train.read(5), image[80:112, 160:192])
    (tmp_path / "patches.csv").write_text("\n".join([*rows, "s0.tif,glass,240,0"]) + "\n")  # past the edge
    with pytest.raises(DataError, match=r"patches.csv, line 26, column `x`: the patch at x=240, y=0 passes the edge "
                                        r"of .*s0.tif: .* data.on_bad_sample=skip"):
        load_or_generate_source(data)
    data.on_bad_sample, data.max_bad_fraction = "skip", 0.1  # a bad row as any other: left out, and listed
    skipped = load_or_generate_source(data)
    assert len(skipped.train) + len(skipped.val) == 24 and [line for line, _, _ in skipped.left_out] == [26]
    assert "column `x`" in skipped.left_out[0][1] and "passes the edge" in skipped.left_out[0][2]


def test_a_file_without_a_pyramid_is_streamed_for_its_mask_and_its_no_data_read_from_its_tag(tmp_path):
    """One level, tiled: the thumbnail is every step-th pixel of it, read a band of tiles at a time; GDAL_NODATA."""
    image = np.random.default_rng(3).integers(1, 60000, (700, 520, 4), dtype=np.uint16)
    image[:, :100] = 0
    path = tmp_path / "scene.tif"
    tifffile.imwrite(path, image, tile=(128, 128), photometric="minisblack", planarconfig="contig",
                     extratags=[(42113, "s", 0, "0", True)])
    slide = slide_of(path, LIMIT)
    assert slide.levels == ((700, 520),) and slide.nodata == 0.0 and slide.bands == 4
    thumb, cell = thumbnail(slide, 8)
    assert cell == 8 and np.array_equal(thumb, image[::8, ::8])
    assert not foreground(thumb, nodata=slide.nodata)[:, :12].any()  # the no-data strip is background


def test_a_slides_score_is_its_patches_mean_max_or_top_k_mean():
    scores = np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.4, 0.6]])
    assert np.allclose(aggregate(scores, "mean", 2), [0.45, 0.55])
    assert np.allclose(aggregate(scores, "max", 2), np.array([0.9, 0.8]) / 1.7)
    assert np.allclose(aggregate(scores, "topk_mean", 2), np.array([0.65, 0.75]) / 1.4)


def test_previews_sheet_shows_where_the_drawn_patches_lie(slide, tmp_path):
    path = str(slide[0])
    split = RandomPatches(FileSplit([path], [0]), [layout_of(path, settings(level=0), grid=False)], settings(level=0))
    write_patch_sheet(split, [0, 1, 2, 3], 0, tmp_path / "patches.png")
    sheet = np.asarray(Image.open(tmp_path / "patches.png").convert("RGB"))
    assert ((sheet == (250, 220, 0)).all(axis=2)).sum() > 4 * 40  # four patches outlined in yellow


def test_tissue_from_edge_to_edge_is_foreground_and_glass_is_not(tmp_path):
    """Glass is told by what it is, bright and nearly grey: stroma and nuclei both tissue, not split apart."""
    write_slide(tmp_path / "he.tif", he_pixels(512, np.random.default_rng(4)), levels=3, tile=128)
    tissue = layout_of(str(tmp_path / "he.tif"), settings(level=0), grid=True)
    assert len(tissue.cells()) == 8 * 8 and tissue.foreground > 0.95
    image, drawn = slide_pixels(512, 1, np.random.default_rng(5))  # negative controls: glass with a blob, glass
    write_slide(tmp_path / "blob.tif", image, levels=3, tile=128)
    blob = layout_of(str(tmp_path / "blob.tif"), settings(level=0), grid=True)
    assert 0 < len(blob.cells()) < 8 * 8 and abs(blob.foreground - drawn.mean()) < 0.05
    write_slide(tmp_path / "glass.tif", np.full((512, 512, 3), GLASS, np.uint8), levels=3, tile=128)
    assert not len(layout_of(str(tmp_path / "glass.tif"), settings(level=0), grid=True).cells())


def planted_empty_mask(slide, tmp_path, monkeypatch):
    """(the slide's path, its cells, its cached mask), an empty mask planted in the cache under today's key."""
    monkeypatch.setenv("APP_CACHE_DIR", str(tmp_path))
    path = str(slide[0])
    made = layout_of(path, settings(level=0), grid=True).cells()
    (cached,) = (tmp_path / "masks").glob("*.npz")
    with np.load(cached) as stored:
        cell = float(stored["cell"])
    np.savez(cached, mask=np.zeros((64, 64), bool), cell=cell)
    return path, made, cached


def test_a_damaged_mask_cache_is_made_again(slide, tmp_path, monkeypatch):
    path, made, cached = planted_empty_mask(slide, tmp_path, monkeypatch)
    assert not len(layout_of(path, settings(level=0), grid=True).cells())  # the planted mask: the cache is read
    cached.write_bytes(cached.read_bytes()[:100])  # cut short: made again, and stored whole
    assert np.array_equal(layout_of(path, settings(level=0), grid=True).cells(), made)
    with np.load(cached) as stored:
        assert stored["mask"].any()


def test_a_mask_cached_by_an_earlier_rule_is_made_again(slide, tmp_path, monkeypatch):
    path, made, _ = planted_empty_mask(slide, tmp_path, monkeypatch)
    assert not len(layout_of(path, settings(level=0), grid=True).cells())  # planted under today's key: read
    monkeypatch.setattr(masks, "RULE", masks.RULE + 1)  # the rule changes: the planted mask is not today's
    assert np.array_equal(layout_of(path, settings(level=0), grid=True).cells(), made)


def test_a_slide_whose_tiles_cannot_be_decoded_is_named_and_predicts_grid_goes_on(slide, tmp_path):
    broken = tmp_path / "broken.tif"
    write_slide(broken, slide[1], levels=3, tile=128)
    zero_tiles(broken, slice(1, None))  # the levels the mask is made from
    with pytest.raises(DataError, match=r"broken.tif cannot be read as patches: its level 2 cannot be read .*Jpeg"):
        layout_of(str(broken), settings(level=0), grid=True)
    flat = tmp_path / "photo.jpg"
    Image.fromarray(slide[1][:200, :200]).save(flat)
    split, gone = grid_split([str(broken), str(slide[0]), str(flat)], settings(level=1))
    assert split.images.paths == [str(slide[0])] and len(split) > 4  # the readable slide: its patches
    assert set(gone) == {str(broken), str(flat)} and "has levels 0 to 0" in gone[str(flat)]


def test_a_patch_larger_than_every_image_is_named_as_the_cause(slide, tmp_path):
    source = Source(name="folder", class_names=["a"], train=FileSplit([str(slide[0])], [0]),
                    val=FileSplit([str(slide[0])], [0]), fingerprint="f", split={})
    with pytest.raises(DataError, match=r"its 1024×1024 pixels are fewer than a patch's 2048×2048") as refused:
        patched(source, settings(size=[2048, 2048], level=0, min_foreground=0.0))
    assert "min_foreground" not in str(refused.value)
    blank = tmp_path / "glass.tif"  # negative control: a patch that fits, on glass: the foreground is the cause
    write_slide(blank, np.full((512, 512, 3), GLASS, np.uint8), levels=2, tile=128)
    glass = dataclasses.replace(source, train=FileSplit([str(blank)], [0]))
    with pytest.raises(DataError, match=r"no patch with data.patches.min_foreground=0.5 of foreground"):
        patched(glass, settings(level=0))


def test_images_left_out_and_a_grid_that_overlaps_much_are_warned_of_with_counts(slide, tmp_path, caplog):
    blank = tmp_path / "glass.tif"
    write_slide(blank, np.full((512, 512, 3), GLASS, np.uint8), levels=2, tile=128)
    source = Source(name="folder", class_names=["a"], train=FileSplit([str(slide[0]), str(blank)], [0, 0]),
                    val=FileSplit([str(slide[0])], [0]), fingerprint="f", split={})
    with caplog.at_level(logging.INFO, logger="app.data"):
        patched(source, settings(level=0))
    assert [r.levelname for r in caplog.records] == ["WARNING"] and str(blank) in caplog.text  # the glass, named
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="app.data"):
        made = patched(source, settings(level=0, stride=[8, 8]))
    val = made.split["patches"]["val"]["patches"]
    assert "data.patches.stride=[8, 8] of a [64, 64] patch reads each pixel in up to 64 patches" in caplog.text
    assert f"val {val:,} patches of 1 images" in caplog.text


def test_a_heatmap_of_a_slide_without_a_pyramid_holds_a_band_of_tiles_never_its_level(tmp_path, monkeypatch):
    """The thumbnail is streamed a band of tiles at a time, and keeps only its own pixels of each band."""
    monkeypatch.setattr(patch_scores, "HEATMAP_SIDE", 128)  # a 16× thumbnail: the picture's own arrays are small
    image = np.tile(slide_pixels(512, 0, np.random.default_rng(6))[0], (4, 4, 1))  # 2048², one level
    path = tmp_path / "flat.tif"
    tifffile.imwrite(path, image, tile=(128, 128), compression="jpeg", photometric="rgb")
    layout = layout_of(str(path), settings(level=0, min_foreground=0.0), grid=True)
    split = GridPatches(FileSplit([str(path)], [0]), [layout], settings(level=0, min_foreground=0.0))
    write_heatmap(split, 0, [(0, 0, 0.9)], tmp_path / "warm")  # imports and codecs' first use, outside the count
    tracemalloc.start()
    try:
        write_heatmap(split, 0, [(0, 0, 0.9)], tmp_path / "heat")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "heat.png").is_file()
    assert peak < image.nbytes / 4, f"{peak:,} bytes at the peak for a level of {image.nbytes:,}"


def test_a_mask_cache_that_cannot_be_written_is_named_and_the_mask_made_without_it(slide, tmp_path, monkeypatch,
                                                                                    caplog):
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("APP_CACHE_DIR", str(tmp_path / "afile" / "cache"))  # under a regular file
    path = str(slide[0])
    with caplog.at_level(logging.INFO, logger="app.data"):
        unkept = layout_of(path, settings(level=0), grid=True).cells()
    assert "the mask cache " + str(tmp_path / "afile" / "cache" / "masks") + " cannot be written" in caplog.text
    assert "APP_CACHE_DIR" in caplog.text and "damaged" not in caplog.text
    monkeypatch.setenv("APP_CACHE_DIR", str(tmp_path / "cache"))  # negative control: a folder it can write
    assert np.array_equal(layout_of(path, settings(level=0), grid=True).cells(), unkept)
    assert len(list((tmp_path / "cache" / "masks").glob("*.npz"))) == 1


def test_an_rgba_slides_transparent_part_is_white_background_and_its_patches_rgb(tmp_path):
    """Alpha 0 (outside the scanned area) is laid on white, as OpenSlide gives it: glass, never tissue."""
    image = np.full((512, 512, 3), GLASS, np.uint8)
    image[:, 192:320] = (150, 60, 130)  # glass, then tissue in two columns of patches
    rgba = np.dstack([image, np.full((512, 512), 255, np.uint8)])
    rgba[:, 320:] = 0  # transparent black on the right 3/8
    path = tmp_path / "rgba.tif"
    write_slide(path, rgba, levels=2, tile=128, extrasamples=[2])
    layout = layout_of(str(path), settings(level=0), grid=True)
    assert layout.slide.bands == 3 and {layout.corner(int(c))[1] for c in layout.cells()} == {192, 256}
    assert len(layout.cells()) == 8 * 2  # the tissue's columns; the glass and the transparent ones left out
    assert np.array_equal(read_region(layout.slide, 0, (0, 448), (4, 4)), np.full((4, 4, 3), 255, np.uint8))
    opaque = tmp_path / "opaque.tif"  # negative control: alpha 255 throughout, the black is dark grey, not glass
    rgba[:, 320:, 3] = 255
    write_slide(opaque, rgba, levels=2, tile=128, extrasamples=[2])
    assert np.array_equal(read_region(slide_of(opaque, LIMIT), 0, (0, 448), (4, 4)), np.zeros((4, 4, 3), np.uint8))


def test_a_scenes_bands_keep_all_their_valid_data_and_leave_out_its_no_data(tmp_path):
    """Band data: the foreground is what holds data, not a split of its values; grey microscopy keeps its split."""
    rng = np.random.default_rng(8)
    scene = rng.integers(8000, 12000, (512, 512, 6)).astype(np.uint16)
    scene[:, :, :3] += (rng.random((512, 512, 1)) > 0.5).astype(np.uint16) * 3000  # two kinds of ground
    scene[:, 256:] = 0  # the right half: no data
    tifffile.imwrite(tmp_path / "scene.tif", scene, photometric="minisblack", planarconfig="contig",
                     tile=(128, 128), compression="zlib", extratags=[(42113, "s", 0, "0", True)])
    layout = layout_of(str(tmp_path / "scene.tif"), settings(level=0), grid=True)
    lefts = {layout.corner(int(c))[1] for c in layout.cells()}
    assert len(layout.cells()) == 8 * 4 and lefts == {0, 64, 128, 192}  # every valid patch; no no-data one
    grey = np.clip(rng.normal(20, 4, (512, 512)), 0, 255).astype(np.uint8)  # negative control: one band, dark,
    grey[128:384, 128:384] = 200  # a bright square: Otsu's split, the square alone
    tifffile.imwrite(tmp_path / "grey.tif", grey, tile=(128, 128), photometric="minisblack")
    assert len(layout_of(str(tmp_path / "grey.tif"), settings(level=0), grid=True).cells()) == 4 * 4


def test_a_dark_field_slide_takes_its_bright_tissue_through_mask_bands(tmp_path):
    """The RGB rule is brightfield's (glass bright); a fluorescence slide's black is not glass: mask_bands splits it."""
    image, drawn = slide_pixels(512, 0, np.random.default_rng(9))
    image[~drawn] = np.clip(np.random.default_rng(10).normal(8, 3, ((~drawn).sum(), 3)), 0, 255).astype(np.uint8)
    write_slide(tmp_path / "dark.tif", image, levels=2, tile=128)
    dark = layout_of(str(tmp_path / "dark.tif"), settings(level=0, mask_bands=[0, 1, 2]), grid=True)
    assert abs(dark.foreground - drawn.mean()) < 0.05
    brightfield = layout_of(str(tmp_path / "dark.tif"), settings(level=0), grid=True)  # the control: black counted
    assert brightfield.foreground > drawn.mean() + 0.08


def test_a_slide_whose_mask_level_is_damaged_is_a_bad_sample_left_out_by_name_under_skip(tmp_path, caplog):
    rng = np.random.default_rng(11)
    for label, name in enumerate(("stripes", "dots")):
        (tmp_path / name).mkdir()
        for i in range(2):
            write_slide(tmp_path / name / f"{i}.tif", slide_pixels(512, label, rng)[0], levels=3, tile=128)
    broken = tmp_path / "dots" / "1.tif"
    zero_tiles(broken, slice(2, 3))  # the level its mask is made from
    data = OmegaConf.structured(FolderDataConfig(path=str(tmp_path), val_fraction=0.5,
                                                 patches=PatchesConfig(size=[64, 64], level=0)))
    with pytest.raises(DataError, match=r"dots/1.tif cannot be read as patches: its level 2 cannot be read"):
        load_or_generate_source(data)  # raise, the default: refused by name
    data.on_bad_sample = "skip"
    with caplog.at_level(logging.WARNING, logger="app.data"):
        source = load_or_generate_source(data)
    assert str(broken) not in source.train.images.paths + source.val.images.paths
    assert len(source.train.images.paths) + len(source.val.images.paths) == 3  # the others go on
    assert list(source.split["patches"]["unreadable"]) == [str(broken)]
    assert "left out, unreadable" in caplog.text and str(broken) in caplog.text


def test_the_source_closes_the_slides_its_masks_opened_and_patched_alone_leaves_them_open(tmp_path, monkeypatch):
    """The training process reads each slide's mask, then its workers read the regions: the slides the masks opened
    are closed by `load_or_generate_source`, which decides so; `patched` (the control) leaves them open."""
    rng = np.random.default_rng(15)
    for label, name in enumerate(("stripes", "dots")):
        (tmp_path / "data" / name).mkdir(parents=True)
        for i in range(2):
            write_slide(tmp_path / "data" / name / f"{i}.tif", slide_pixels(256, label, rng)[0], levels=2, tile=128)
    data = OmegaConf.structured(FolderDataConfig(path=str(tmp_path / "data"), val_fraction=0.5,
                                                 patches=PatchesConfig(size=[32, 32], level=0)))

    def open_slides() -> list[str]:
        return [f.path for f in psutil.Process().open_files() if f.path.startswith(str(tmp_path / "data"))]

    monkeypatch.setenv("APP_CACHE_DIR", str(tmp_path / "first"))  # no mask cached: each is read from its slide
    patched(folder_source(data.path, data.val_fraction), data.patches)
    assert len(open_slides()) == 4
    close_open_files()
    monkeypatch.setenv("APP_CACHE_DIR", str(tmp_path / "second"))  # none cached again: the masks open the slides
    assert len(load_or_generate_source(data).train) and open_slides() == []


def test_one_band_takes_the_side_of_otsus_split_that_glass_or_black_does_not_surround(tmp_path):
    """A grey brightfield scan (glass 234, tissue ~120): the dark side is the tissue; the same slide inverted, as a
    dark-field one (the control), keeps its bright side."""
    _, drawn = slide_pixels(512, 0, np.random.default_rng(12))
    noise = np.random.default_rng(13).normal(0, 5, drawn.shape)
    grey = np.clip(np.where(drawn, 120, 234) + noise, 0, 255).astype(np.uint8)
    for name, pixels in (("brightfield.tif", grey), ("darkfield.tif", 255 - grey)):
        tifffile.imwrite(tmp_path / name, pixels, tile=(128, 128), photometric="minisblack")
        found = layout_of(str(tmp_path / name), settings(level=0), grid=True).foreground
        assert abs(found - drawn.mean()) < 0.05, (name, found, drawn.mean())


def test_an_rgb_slide_with_no_patch_for_its_grey_or_pale_tissue_is_told_it_was_taken_as_glass(tmp_path):
    """Grey tissue (~130) and pale IHC-like tissue edge to edge read as glass under the RGB rule: the message says so
    and names mask_bands; with it (the control) the same slides have their patches."""
    rng = np.random.default_rng(14)
    for name, colour in (("grey.tif", (130, 130, 130)), ("pale.tif", (200, 196, 214))):
        pixels = np.clip(np.array(colour) + rng.normal(0, 4, (256, 256, 3)), 0, 255).astype(np.uint8)
        write_slide(tmp_path / name, pixels, levels=1, tile=128)
        layout = layout_of(str(tmp_path / name), settings(level=0), grid=True)
        assert not layout.valid.any()
        said = why_none(layout, settings(level=0))
        assert "taken as glass" in said and "data.patches.mask_bands=[0,1,2]" in said, said
        split = layout_of(str(tmp_path / name), settings(level=0, mask_bands=[0, 1, 2]), grid=True)
        assert split.valid.any() and "glass" not in why_none(split, settings(level=0, mask_bands=[0, 1, 2]))
