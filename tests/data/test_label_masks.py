"""app/data/pixels/label_masks.py on real files Pillow and tifffile write: each kind of mask users keep read as its
class indices, each kind that holds none refused with its reason, the size from the header, the values checked."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tifffile
from forged import png_declaring
from PIL import Image
from segmentation_data import IGNORE, write_raster_set, write_texture_folder

from app.data.pixels.decode import DecodeError
from app.data.pixels.label_masks import check_mask_values, mask_size, read_mask

SHAPE = (5, 7)  # not square: rows and columns cannot be swapped unseen


def indices(high: int, dtype=np.uint8) -> np.ndarray:
    return (np.arange(np.prod(SHAPE)).reshape(SHAPE) * 37 % (high + 1)).astype(dtype)


def opened(path) -> Image.Image:
    """`path` as Pillow opens it, loaded and closed."""
    with Image.open(path) as img:
        img.load()
        return img


def refused(path, max_pixels: int | None = None) -> str:
    with pytest.raises(DecodeError) as caught:
        read_mask(path, max_pixels)
    return str(caught.value)


def test_a_palette_mask_is_read_by_its_indices_never_its_colours(tmp_path):
    mask = indices(3)
    img = Image.fromarray(mask)
    img.putpalette([200, 10, 10, 10, 200, 10, 10, 10, 200, 250, 250, 250] + [0, 0, 0] * 252)
    img.save(tmp_path / "p.png")
    assert opened(tmp_path / "p.png").mode == "P"
    read = read_mask(tmp_path / "p.png", None)
    assert read.dtype == np.uint8 and read.flags.writeable and np.array_equal(read, mask)
    # negative control: the colours, as a conversion to grey reads them, are other values
    assert not np.array_equal(np.asarray(opened(tmp_path / "p.png").convert("L")), mask)
    colours = np.zeros((3, 256), np.uint16)
    colours[:, 1:4] = [[60000, 0, 0], [0, 60000, 0], [0, 0, 60000]]  # a GIS tool's colour table on a label raster
    tifffile.imwrite(tmp_path / "p.tif", mask, photometric="palette", colormap=colours)
    assert np.array_equal(read_mask(tmp_path / "p.tif", None), mask)


@pytest.mark.parametrize(("name", "values", "mode", "dtype"), [
    ("grey.png", indices(200), "L", np.uint8),
    ("sixteen.png", indices(1000, np.uint16) * 60, "I;16", np.uint16),
    ("sixteen.pgm", indices(1000, np.uint16) * 60, "I", np.uint16),  # Pillow's 32-bit mode, its values fit
])
def test_grey_masks_are_read_as_they_are(tmp_path, name, values, mode, dtype):
    Image.fromarray(values).save(tmp_path / name)
    assert opened(tmp_path / name).mode == mode
    read = read_mask(tmp_path / name, None)
    assert read.dtype == dtype and np.array_equal(read, values)
    assert mask_size(tmp_path / name) == read.shape == SHAPE


def test_a_one_bit_mask_is_zeros_and_ones(tmp_path):
    bits = indices(1).astype(bool)
    Image.fromarray(bits).save(tmp_path / "bits.png")
    assert opened(tmp_path / "bits.png").mode == "1"
    read = read_mask(tmp_path / "bits.png", None)
    assert read.dtype == np.uint8 and np.array_equal(read, bits.astype(np.uint8))


@pytest.mark.parametrize(("values", "dtype"), [
    (indices(250), np.uint8),
    (indices(3000, np.uint16) * 20, np.uint16),
    (indices(9)[..., None], np.uint8),  # (H, W, 1)
    (indices(300, np.int16), np.uint16),  # signed, none negative
    (indices(1).astype(bool), np.uint8),  # 1-bit
])
def test_tiff_label_rasters_are_read_as_their_integers(tmp_path, values, dtype):
    tifffile.imwrite(tmp_path / "m.tif", values, photometric="minisblack")
    read = read_mask(tmp_path / "m.tif", None)
    assert read.dtype == dtype and read.shape == SHAPE
    assert np.array_equal(read, values.reshape(SHAPE).astype(dtype))
    assert mask_size(tmp_path / "m.tif") == SHAPE


def write_refused(path, kind: str) -> None:
    if kind == "rgb":
        Image.fromarray(np.stack([indices(2)] * 3, axis=-1)).save(path, "PNG")
    elif kind == "grey-alpha":
        Image.fromarray(indices(2)).convert("LA").save(path, "PNG")
    elif kind == "jpeg":
        Image.fromarray(indices(2)).save(path, "JPEG")
    elif kind.startswith("tiff-"):
        arrays = {"tiff-float": indices(2).astype(np.float32), "tiff-3-band": np.stack([indices(2)] * 3, axis=-1),
                  "tiff-negative": indices(2).astype(np.int16) - 1,
                  "tiff-too-wide": indices(9).astype(np.uint32) * 10_000}
        contig = "contig" if "band" in kind else None  # (H, W, 3) as samples, not 5 pages of 7 × 3
        tifffile.imwrite(path, arrays[kind], photometric="minisblack", planarconfig=contig)


@pytest.mark.parametrize(("kind", "said"), [
    ("rgb", "its mode is RGB (colour): a mask holds one class index a pixel; save it as class indices: a palette PNG"),
    ("grey-alpha", "its mode is LA (grey and alpha)"),
    ("jpeg", "it is a JPEG: lossy compression changes class indices"),
    ("tiff-too-wide", "its samples (uint32) run from 0 to 90000: a mask's class indices are 0..65535"),
    ("tiff-float", "its samples are float32 floats: a mask holds class indices, integers"),
    ("tiff-3-band", "it holds more than one band (S=3, axes YXS): a mask is one band"),
    ("tiff-negative", "its samples (int16) run from -1 to 1"),
])
def test_masks_that_hold_no_class_indices_are_refused_saying_what_they_hold(tmp_path, kind, said):
    write_refused(tmp_path / "m", kind)
    assert said in refused(tmp_path / "m")


def test_a_mask_over_max_pixels_is_refused_from_its_header_before_it_is_decoded(tmp_path):
    png_declaring(tmp_path / "bomb.png", 4000, 3000)  # its pixel data would not decode: the header alone refuses
    assert "declares 4000×3000 = 12,000,000 pixels, above data.max_image_pixels=1000000" in refused(
        tmp_path / "bomb.png", 1_000_000)
    tifffile.imwrite(tmp_path / "big.tif", np.zeros((40, 50), np.uint8), photometric="minisblack")
    raw = (tmp_path / "big.tif").read_bytes()
    (tmp_path / "cut.tif").write_bytes(raw[:len(raw) // 2])  # its header whole, half its pixels
    assert "declares 50×40 = 2,000 pixels, above data.max_image_pixels=1999" in refused(tmp_path / "cut.tif", 1999)
    assert "cannot decode TIFF mask" in refused(tmp_path / "cut.tif", 2000)  # negative control: under it, decoded
    assert read_mask(tmp_path / "big.tif", 2000).shape == (40, 50)


def test_truncated_and_corrupt_masks_are_refused(tmp_path):
    Image.fromarray(np.random.default_rng(0).integers(0, 3, (64, 64), dtype=np.uint8)).save(tmp_path / "m.png")
    raw = (tmp_path / "m.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(raw[:len(raw) // 2])
    assert "truncated PNG" in refused(tmp_path / "cut.png")
    (tmp_path / "noise.png").write_bytes(b"not an image at all" * 10)
    assert refused(tmp_path / "noise.png") == "cannot identify image file"
    (tmp_path / "empty.png").write_bytes(b"")
    assert refused(tmp_path / "empty.png") == "empty file"
    (tmp_path / "head.tif").write_bytes(b"II*\0\x08\0")  # a TIFF's magic, its header cut short
    assert "cannot decode TIFF mask" in refused(tmp_path / "head.tif")
    with pytest.raises(DecodeError, match="cannot"):
        mask_size(tmp_path / "head.tif")


def test_check_mask_values_names_the_first_wrong_pixel():
    mask = np.zeros((6, 20), np.uint8)
    mask[1, 2], mask[2, 5] = 2, IGNORE
    assert check_mask_values(mask, 3, IGNORE) is None  # the negative control: every value a class or ignored
    mask[3, 12], mask[4, 0] = 7, 9
    assert check_mask_values(mask, 3, IGNORE) == ("value 7 at row 3, column 12 is neither one of the 3 classes (0..2) "
                                                  "nor data.ignore_index 255 (2 such pixels)")
    assert check_mask_values(mask, 10, None) == ("value 255 at row 2, column 5 is not one of the 10 classes (0..9), "
                                                 "and no data.ignore_index is set")
    assert check_mask_values(np.full((2, 2), 300, np.uint16), 3, 300) is None


def test_the_generated_sets_masks_read_back_as_written(tmp_path):
    texture = write_texture_folder(tmp_path / "t", train=2, val=1, size=32)
    shuffled = write_texture_folder(tmp_path / "s", train=2, val=1, size=32, shuffle_masks=True)
    rasters = write_raster_set(tmp_path / "r", n=4, size=32)
    read = [read_mask(mask, None) for _, mask, _ in texture.samples]
    assert all(check_mask_values(m, 3, IGNORE) is None and m.dtype == np.uint8 for m in read)
    assert {1, 2, IGNORE} <= set(np.unique(np.concatenate([m.ravel() for m in read])))
    assert [split for *_, split in texture.samples] == ["train", "train", "val"]
    # the shuffled set: the same images, each with its neighbour's mask (the control that leaves nothing to learn)
    assert [i.read_bytes() for i, _, _ in texture.samples] == [i.read_bytes() for i, _, _ in shuffled.samples]
    assert np.array_equal(read_mask(shuffled.samples[0][1], None), read[1])
    table = rasters.table.read_text().splitlines()
    assert table[:2] == ["image,mask,split", "tiles/tile-000.tif,labels/tile-000.tif,train"]
    assert table[4] == "tiles/tile-003.tif,labels/tile-003.tif,val"
    tile, labels = tifffile.imread(rasters.samples[1][0]), read_mask(rasters.samples[1][1], None)
    assert tile.shape == (32, 32, 6) and tile.dtype == np.uint16 and labels.shape == (32, 32)
    assert check_mask_values(labels, 3, IGNORE) is None and IGNORE in labels


def test_a_png_mask_is_read_without_tifffile(tmp_path):
    """tifffile waits for a TIFF: a worker reading PNG masks never imports it (as images.py's never does)."""
    Image.fromarray(indices(2)).save(tmp_path / "m.png")
    code = ("import sys\nfrom app.data.pixels.label_masks import read_mask, mask_size\n"
            f"read_mask({str(tmp_path / 'm.png')!r}, None), mask_size({str(tmp_path / 'm.png')!r})\n"
            "print('tifffile' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False"], done.stderr[-2000:]
