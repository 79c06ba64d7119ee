"""Scanners' files through OpenSlide (the slides extra, installed for the tests): an Aperio SVS written by tifffile
as scanners write one, its levels, µm a pixel and regions as OpenSlide gives them (RGBA on white), which files go to
OpenSlide under each data.patches.reader, and the refusal naming the extra where it is missing. Training on SVS slides
through the CLI, and the refusal from an install without it: tests/cli/test_patches_cli.py."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from slides import slide_pixels, write_svs

from app.data.pixels import scanner_files
from app.data.slides.regions import read_region, slide_of
from app.errors import DataError

LIMIT = 16_777_216


@pytest.fixture(scope="module")
def svs(tmp_path_factory):
    image, _ = slide_pixels(768, 1, np.random.default_rng(3))
    path = tmp_path_factory.mktemp("svs") / "slide.svs"
    write_svs(path, image, levels=3, tile=128, mpp=0.25)
    return path


def test_an_svs_is_read_by_openslide_its_levels_resolution_and_regions(svs):
    slide = slide_of(svs, LIMIT)
    assert slide.openslide and slide.levels == ((768, 768), (384, 384), (192, 192)) and slide.mpp == 0.25
    assert slide.chunk == (128, 128) and slide.downsample(2) == 4
    with tifffile.TiffFile(svs) as tif:
        level1 = tif.pages[1].asarray()  # the level's own page, decoded by tifffile's JPEG codec
    region = read_region(slide, 1, (100, 60), (48, 64))
    assert region.shape == (48, 64, 3) and region.dtype == np.uint8
    np.testing.assert_array_equal(region, level1[100:148, 60:124])  # the same pixels as tifffile decodes there
    assert np.abs(region.astype(int) - level1[101:149, 60:124]).mean() > 2  # negative control: one row off
    past = read_region(slide, 2, (160, 160), (64, 64))  # 32 of 64 rows and columns past the edge
    assert (past[40:, :] == 255).all() and (past[:, 40:] == 255).all()  # OpenSlide's transparent: white
    assert past[:32, :32].std() > 0  # negative control: the slide itself is not blank


def test_which_files_openslide_reads_under_each_reader(svs, tmp_path):
    plain = tmp_path / "plain.tif"
    tifffile.imwrite(plain, np.zeros((256, 256, 3), np.uint8), tile=(128, 128), photometric="rgb")
    assert not slide_of(svs, LIMIT, "tifffile").openslide  # tifffile reads an SVS as a TIFF
    assert not slide_of(plain, LIMIT, "auto").openslide and slide_of(plain, LIMIT, "openslide").openslide
    assert scanner_files.through_openslide("x.mrxs", "auto") and not scanner_files.through_openslide("x.tif", "auto")


def test_without_the_extra_a_file_only_openslide_reads_is_refused_naming_it(svs, monkeypatch):
    monkeypatch.setattr(scanner_files, "installed", lambda: False)
    with pytest.raises(DataError, match=r"x\.mrxs is read by OpenSlide .* add the slides extra, pip install -e "
                                        r"'\.\[slides\]'"):
        scanner_files.through_openslide("x.mrxs", "auto")
    with pytest.raises(DataError, match="data.patches.reader=openslide"):
        slide_of(svs, LIMIT, "openslide")
    assert not slide_of(svs, LIMIT, "auto").openslide  # an SVS is a TIFF: tifffile reads it without the extra
