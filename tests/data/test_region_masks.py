"""A patch's mask read where the patch lies: a label raster at a quarter of its slide (a tiled TIFF read by region, a
small PNG whole), GeoJSON polygons; through the patch split, each sample the pair of the same place; refusals name
the image and its mask."""

import pickle

import numpy as np
import pytest
import tifffile
from omegaconf import OmegaConf
from PIL import Image
from slides import ANNOTATED_CLASSES, write_annotated_slides

from app.data.masked import MaskedFileSplit, MaskRule
from app.data.pixels.decode import DecodeError
from app.data.slides import region_masks
from app.data.slides.patches import patched
from app.data.slides.regions import slide_of
from app.data.source import Source
from app.errors import DataError
from app.schema.data import PatchesConfig

RULE = MaskRule(3, 255, tuple(ANNOTATED_CLASSES), background=0)
PATCH = 32


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    root = tmp_path_factory.mktemp("annotated")
    return root, write_annotated_slides(root, train=2, val=1, side=256, tile=64)


def source_of(root, masks: str, rule: MaskRule = RULE) -> Source:
    def split(name):
        paths = sorted((root / "slides" / name).glob("*.tif"))
        suffix = ".geojson" if masks == "polygons" else ".tif"
        return MaskedFileSplit([str(p) for p in paths], [str(root / masks / name / f"{p.stem}{suffix}") for p in paths],
                               rule)
    return Source(name="folder", class_names=list(ANNOTATED_CLASSES), train=split("train"), val=split("val"),
                  fingerprint="x", split={})


def patches(**given):
    return OmegaConf.structured(PatchesConfig(size=[PATCH, PATCH], **{"min_foreground": 0.0, "mode": "grid",
                                                                      **given}))


@pytest.mark.parametrize("masks", ["rasters", "polygons"])
@pytest.mark.parametrize("level", [0, 1])
def test_each_patch_is_its_image_and_the_mask_of_the_same_place(annotated, masks, level):
    root, drawn = annotated
    split = patched(source_of(root, masks), patches(level=level)).train
    assert split.mask_dtype == "uint8" and len(split) == 2 * (256 // (PATCH * 2 ** level)) ** 2
    agree = []
    for i in range(len(split)):
        image, mask = split.read(i)
        slide, top, left = split.where(i)
        assert image.shape == (PATCH, PATCH, 3) and mask.shape == (PATCH, PATCH) and mask.dtype == np.uint8
        step, middle = 2 ** level, 2 ** level // 2  # a patch pixel's class: its centre's
        truth = drawn[root / "slides" / "train" / f"train-{slide}.tif"][top + middle:top + PATCH * step:step,
                                                                        left + middle:left + PATCH * step:step]
        agree.append((mask == truth).mean())
    # only borders differ: a quarter-size raster's by up to 2 level-0 pixels, Pillow's and the app's rasterisers' by one
    assert np.mean(agree) >= 0.97, np.mean(agree)
    # the negative control: the next patch's mask is not this one's
    assert np.mean([(split.read(i)[1] == split.read((i + 3) % len(split))[1]).mean() for i in range(8)]) < 0.95


def test_a_raster_is_read_where_the_patch_lies_never_whole(annotated, monkeypatch):
    root, _ = annotated
    split = patched(source_of(root, "rasters"), patches(level=0)).train
    reads, real = [], region_masks.read_region

    def read_region(raster, level, corner, size):
        reads.append(size)
        return real(raster, level, corner, size)

    monkeypatch.setattr(region_masks, "read_region", read_region)
    split.read(5)
    assert reads == [(PATCH // 4, PATCH // 4)]  # the patch's own quarter of the 64² raster


def test_a_png_raster_reads_as_a_tiff_one_and_a_large_one_is_refused(tmp_path, annotated):
    root, _ = annotated
    slide = slide_of(str(root / "slides" / "train" / "train-0.tif"), 2**24)
    quarter = tifffile.imread(root / "rasters" / "train" / "train-0.tif")
    Image.fromarray(quarter).save(tmp_path / "q.png")
    window = region_masks.Window(corner=(64, 96), extent=(32, 32), size=(32, 32))
    as_png = region_masks.region_mask_of(str(tmp_path / "q.png"), slide, rule=RULE, max_chunk_pixels=2**24)
    as_tiff = region_masks.region_mask_of(str(root / "rasters" / "train" / "train-0.tif"), slide, rule=RULE,
                                          max_chunk_pixels=2**24)
    assert as_png.factor == as_tiff.factor == 4
    assert (as_png.read(window) == as_tiff.read(window)).all() and len(np.unique(as_tiff.read(window))) >= 1
    with pytest.raises(DecodeError, match="one chunk .above data.patches.max_chunk_pixels=1000.: save it as a tiled"):
        region_masks.region_mask_of(str(tmp_path / "q.png"), slide, rule=RULE, max_chunk_pixels=1000)


@pytest.mark.parametrize("shape, said", [((60, 64), "it is 64×60 (width×height) where its image is 256×256"),
                                         ((100, 100), "it is 100×100 (width×height) where its image is 256×256")])
def test_a_raster_not_an_integer_fraction_of_its_image_is_refused_naming_both(tmp_path, annotated, shape, said):
    root, _ = annotated
    tifffile.imwrite(tmp_path / "r.tif", np.zeros(shape, np.uint8), tile=(16, 16))
    slide = slide_of(str(root / "slides" / "train" / "train-0.tif"), 2**24)
    with pytest.raises(DecodeError) as refused:
        region_masks.region_mask_of(str(tmp_path / "r.tif"), slide, rule=RULE, max_chunk_pixels=2**24)
    assert said in str(refused.value) and "integer fraction" in str(refused.value)


def test_refusals_name_the_image_and_its_mask(tmp_path, annotated):
    root, _ = annotated
    # polygons with neither an ignore index nor a background: what the unannotated pixels are is asked for
    with pytest.raises(DataError) as refused:
        patched(source_of(root, "polygons", MaskRule(3, None, tuple(ANNOTATED_CLASSES))), patches())
    said = str(refused.value)
    assert "train-0.tif: its mask" in said and "train-0.geojson" in said and "data.masks_background" in said
    # a class the rule does not name
    with pytest.raises(DataError, match="not one of data.classes"):
        patched(source_of(root, "polygons", MaskRule(2, 255, ("glass", "stroma"), background=0)), patches())
    # a raster value that is no class: a bad sample naming the patch and the mask
    split = patched(source_of(root, "rasters", MaskRule(2, None, ("glass", "stripes"))), patches(level=0)).train
    with pytest.raises(DataError) as bad:
        for i in range(len(split)):
            split.read(i)
    assert "train-0.tif (the patch at" in str(bad.value) and "value 2 at row" in str(bad.value)
    # skip: an image whose mask is missing is left out, named; the others stay
    gone = source_of(root, "rasters")
    gone.train.masks[0] = str(tmp_path / "nowhere.tif")
    kept = patched(gone, patches(), skip=True)
    assert kept.split["patches"]["unreadable"] and len(kept.train.images.paths) == 1
    assert "nowhere.tif is missing" in next(iter(kept.split["patches"]["unreadable"].values()))


def test_the_masks_stay_with_their_images_when_a_split_is_taken_apart_and_pickled(annotated):
    root, _ = annotated
    split = patched(source_of(root, "polygons"), patches(level=0)).train
    part = pickle.loads(pickle.dumps(split.take(np.array([7, 3]))))
    assert [(part.read(k)[1] == split.read(i)[1]).all() for k, i in enumerate((7, 3))] == [True, True]
    assert part.mask_dtype == "uint8" and part.describe(0) == split.describe(7)
