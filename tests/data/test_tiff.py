"""TIFFs as scanners and GIS tools write them, written here by tifffile itself: striped and tiled, BigTIFF, JPEG-, LZW-,
Deflate- and ZSTD-compressed, planar and interleaved, 1, 3 and 6 bands, uint8 and uint16, a pyramid; each read back
through a split's fetch and decode bit-exactly against the array written (Pillow, the path before, refuses or cuts
them: the negative control). Then the run's bands and type (data.channels, data.dtype) and their refusals."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import tifffile
from PIL import Image

from app.data.pixels.decode import Decode, DecodeError, Pixels
from app.data.pixels.headers import decode_bytes
from app.data.pixels.images import load_rgb
from app.data.pixels.pixels import normalization, pixels_of
from app.data.pixels.tiff import read_tiff
from app.data.slides.patches import GridPatches, layout_of
from app.data.source import FileSplit
from app.errors import BadSampleError, ConfigError


def pixels(shape, dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)


def read(path, **run) -> np.ndarray:
    """The file through a split, as a worker fetches and decodes it, for a run of `run`'s Pixels."""
    split, decode = FileSplit([str(path)], [0]), Decode(pixels=Pixels(**run))
    return split.decode(0, split.fetch(0, decode), decode)


# (name, array shape, dtype, tifffile.imwrite's keywords): the bands last in the array written. Pillow read the 8-bit
# RGB ones right too (PILLOW_READS); every other one it refuses, or reads as other pixels (the negative control).
VARIANTS = [
    ("striped-grey16", (40, 56), np.uint16, {}),
    ("striped-rgb8", (40, 56, 3), np.uint8, {"photometric": "rgb"}),
    ("tiled-lzw-6band16", (64, 48, 6), np.uint16, {"tile": (16, 16), "compression": "lzw",
                                                    "photometric": "minisblack", "planarconfig": "contig"}),
    ("planar-deflate-6band16", (6, 40, 56), np.uint16, {"compression": "deflate", "photometric": "minisblack",
                                                        "planarconfig": "separate"}),
    ("bigtiff-zstd-rgb16", (40, 56, 3), np.uint16, {"bigtiff": True, "compression": "zstd", "photometric": "rgb"}),
    ("tiled-jpeg-rgb8", (64, 64, 3), np.uint8, {"tile": (16, 16), "compression": "jpeg", "photometric": "rgb"}),
]
PILLOW_READS = {"striped-rgb8", "tiled-jpeg-rgb8"}


@pytest.mark.parametrize(("name", "shape", "dtype", "options"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_each_variant_reads_back_as_written_with_its_bands_last(tmp_path, name, shape, dtype, options):
    written = pixels(shape, dtype)
    if options.get("compression") == "jpeg":  # lossy: what the file holds is tifffile's own decode of it
        written = np.full(shape, 90, dtype)
        written[:32] = 200
    path = tmp_path / f"{name}.tif"
    tifffile.imwrite(path, written, **options)
    expected = np.moveaxis(written, 0, -1) if options.get("planarconfig") == "separate" else written
    expected = expected if expected.ndim == 3 else expected[:, :, None]
    if options.get("compression") == "jpeg":
        expected = tifffile.imread(path)
    got = read(path, channels="all", bands=expected.shape[2], dtype=np.dtype(dtype).name)
    assert got.dtype == dtype and got.flags.c_contiguous and np.array_equal(got, expected)
    # negative control: Pillow, the reader before, refuses the file or hands back other pixels
    try:
        with Image.open(path) as image:
            pillow = np.asarray(image.convert("RGB"))
    except Exception:  # noqa: BLE001 - a refusal is the point
        return
    assert (name in PILLOW_READS) == (pillow.dtype == got.dtype and np.array_equal(pillow, got))


def test_a_pyramid_is_read_at_the_smallest_level_that_covers_the_transforms(tmp_path):
    base = pixels((256, 192, 3), np.uint8)
    path = tmp_path / "pyramid.tif"
    with tifffile.TiffWriter(path) as tif:
        tif.write(base, subifds=2, tile=(64, 64), photometric="rgb")
        for factor in (2, 4):
            tif.write(base[::factor, ::factor], subfiletype=1, tile=(64, 64), photometric="rgb")
    assert read_tiff(path, min_short_side=None, max_pixels=None).shape == (256, 192, 3)
    half = read_tiff(path, min_short_side=60, max_pixels=None)  # the quarter level's short side, 48, is too small
    assert np.array_equal(half, base[::2, ::2])
    assert np.array_equal(read_tiff(path, min_short_side=48, max_pixels=None), base[::4, ::4])
    with pytest.raises(DecodeError, match="declares 96×128"):  # the limit applies to the level read
        read_tiff(path, min_short_side=60, max_pixels=96 * 128 - 1)


def test_the_run_takes_its_bands_and_type_and_refuses_what_would_cut_bits(tmp_path):
    six = pixels((24, 32, 6), np.uint16)
    tifffile.imwrite(tmp_path / "six.tif", six, photometric="minisblack", planarconfig="contig")
    assert np.array_equal(read(tmp_path / "six.tif", channels=(3, 2, 1), bands=3, dtype="uint16"), six[:, :, [3, 2, 1]])
    cases = [({"channels": "all", "bands": 6, "dtype": "uint8"}, "16-bit image.*data.dtype=uint16"),
             ({"channels": "all", "bands": 7, "dtype": "uint16"}, "has 6 bands where this run reads 7"),
             ({"channels": (6,), "bands": 1, "dtype": "uint16"}, r"has 6 bands; data.channels=\[6\] reads band 6"),
             ({"channels": "rgb", "bands": 3, "dtype": "uint16"}, "6 bands; data.channels=rgb reads 1, 3 or 4")]
    for run, why in cases:
        with pytest.raises(BadSampleError, match=why):
            read(tmp_path / "six.tif", **run)
    grey = pixels((8, 8), np.uint16)
    Image.fromarray(grey).save(tmp_path / "grey16.png")
    with pytest.raises(BadSampleError, match="16-bit image"):  # no longer scaled to 8 bits: refused in a uint8 run
        read(tmp_path / "grey16.png")
    assert np.array_equal(read(tmp_path / "grey16.png", channels="all", bands=1, dtype="uint16")[:, :, 0], grey)
    rgb8 = pixels((8, 8, 3), np.uint8)
    Image.fromarray(rgb8).save(tmp_path / "rgb8.png")
    widened = read(tmp_path / "rgb8.png", dtype="uint16")  # 8 bits widened for a uint16 run, the values kept
    assert widened.dtype == np.uint16 and np.array_equal(widened, rgb8)
    assert np.array_equal(load_rgb(tmp_path / "rgb8.png"), rgb8)  # negative control: today's 8-bit path unchanged


def test_a_16_bit_rgb_png_keeps_its_16_bits(tmp_path):
    import cv2

    rgb = pixels((12, 10, 3), np.uint16)
    cv2.imwrite(str(tmp_path / "rgb16.png"), rgb[:, :, ::-1])  # OpenCV writes BGR
    assert np.array_equal(read(tmp_path / "rgb16.png", dtype="uint16"), rgb)
    with Image.open(tmp_path / "rgb16.png") as image:  # negative control: Pillow hands back 8 bits
        assert np.asarray(image.convert("RGB")).dtype == np.uint8


def test_float_and_signed_rasters_and_stacks_are_refused_naming_what_they_are(tmp_path):
    tifffile.imwrite(tmp_path / "dem.tif", np.zeros((8, 8), np.float32))
    tifffile.imwrite(tmp_path / "signed.tif", np.zeros((8, 8), np.int16))
    tifffile.imwrite(tmp_path / "zstack.tif", np.zeros((3, 8, 8), np.uint8), photometric="minisblack",
                     metadata={"axes": "ZYX"})
    for name, why in (("dem.tif", "float32.*elevation"), ("signed.tif", "int16"), ("zstack.tif", "a stack.*Z=3")):
        with pytest.raises(BadSampleError, match=why):
            read(tmp_path / name, channels="all", bands=1, dtype="uint16")


def test_the_plan_counts_a_tiffs_decode_as_the_level_read_with_every_band(tmp_path):
    tifffile.imwrite(tmp_path / "six.tif", pixels((40, 56, 6), np.uint16), photometric="minisblack",
                     planarconfig="contig", tile=(16, 16))
    assert decode_bytes(tmp_path / "six.tif", Decode()) == (40 * 56 * 6 * 2, 0)
    base = pixels((256, 192, 3), np.uint8)
    with tifffile.TiffWriter(tmp_path / "pyramid.tif") as tif:
        tif.write(base, subifds=1, tile=(64, 64), photometric="rgb")
        tif.write(base[::4, ::4], subfiletype=1, tile=(64, 64), photometric="rgb")
    assert decode_bytes(tmp_path / "pyramid.tif", Decode(min_short_side=40)) == (64 * 48 * 3, 0)  # the small level
    assert decode_bytes(tmp_path / "pyramid.tif", Decode(min_short_side=60)) == (256 * 192 * 3, 0)
    assert decode_bytes(tmp_path / "pyramid.tif", Decode(max_pixels=100)) == (0, 0)  # refused: counts nothing


def test_channels_all_reads_the_bands_most_images_have_and_names_the_odd_file(tmp_path, caplog):
    """A 4-band tile sorting first among 6-band ones: the run reads 6 and the 4-band file is the bad sample."""
    tifffile.imwrite(tmp_path / "a_odd.tif", pixels((8, 8, 4), np.uint16), photometric="minisblack",
                     planarconfig="contig")
    for i in range(5):
        tifffile.imwrite(tmp_path / f"b{i}.tif", pixels((8, 8, 6), np.uint16, i),
                         photometric="minisblack", planarconfig="contig")
    paths = sorted(str(p) for p in tmp_path.glob("*.tif"))
    split = FileSplit(paths, [0] * len(paths))
    run = pixels_of("all", "uint16", split=split)
    assert run.bands == 6 and "a_odd.tif (4)" in caplog.text
    decode = Decode(pixels=run)
    assert read(paths[1], channels="all", bands=run.bands, dtype="uint16").shape == (8, 8, 6)
    with pytest.raises(BadSampleError, match="a_odd.tif.*has 4 bands where this run reads 6"):
        split.decode(0, split.fetch(0, decode), decode)
    assert pixels_of("all", "uint16", split=FileSplit(paths[:1], [0])).bands == 4  # alone, its own count


def test_a_constant_band_is_refused_naming_its_index():
    mean, std = [1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 0.0, 7.0]
    with pytest.raises(ConfigError, match=r"band 2 \(from 0\) has std 0.0.*data.channels"):
        normalization(SimpleNamespace(mean=mean, std=std, stats=None), 4)
    assert normalization(SimpleNamespace(mean=mean, std=[5.0, 6.0, 1.0, 7.0], stats=None), 4)[1][2] == 1.0


def test_a_1_bit_tiff_is_read_as_8_bit_grey_as_pillow_reads_it(tmp_path):
    bits = pixels((12, 16), np.uint8) > 127
    for photometric in ("miniswhite", "minisblack"):  # MINISWHITE (tifffile's default for 1 bit): a set bit is black
        tifffile.imwrite(tmp_path / f"{photometric}.tif", bits, photometric=photometric)
        with Image.open(tmp_path / f"{photometric}.tif") as image:
            assert image.mode == "1"
            expected = np.asarray(image.convert("L"))
        got = read(tmp_path / f"{photometric}.tif", channels="all", bands=1)
        assert got.dtype == np.uint8 and np.array_equal(got[:, :, 0], expected) and set(np.unique(got)) == {0, 255}
        assert decode_bytes(tmp_path / f"{photometric}.tif", Decode()) == (12 * 16, 0)


def test_all_counts_a_patch_splits_bands_from_its_images(tmp_path):
    """data.channels=all over patches of 6-band tiles: the bands of the tiles (the memory plan's ring too), not 3."""
    tiles = []
    for i in range(2):
        tiles.append(str(tmp_path / f"t{i}.tif"))
        tifffile.imwrite(tiles[-1], pixels((128, 128, 6), np.uint16, i), tile=(64, 64), photometric="minisblack",
                         planarconfig="contig")
    grid = SimpleNamespace(size=[64, 64], level=0, downsample=None, mpp=None, mode=SimpleNamespace(value="grid"),
                           stride=None, per_image=None, min_foreground=0.0, mask_bands=None, max_chunk_pixels=2**24,
                           chunk_cache_mib=0, reader=SimpleNamespace(value="auto"))
    patches = GridPatches(FileSplit(tiles, [0, 1]), [layout_of(t, grid, grid=True) for t in tiles], grid)
    assert pixels_of("all", "uint16", split=FileSplit(tiles, [0, 1])).bands == 6  # negative control: the files alone
    assert pixels_of("all", "uint16", split=patches).bands == 6


def test_a_stats_json_of_other_bands_or_another_type_is_refused_naming_both(tmp_path):
    made = tmp_path / "stats.json"
    figures = [{"mean": 100.0 + b, "std": 5.0} for b in range(3)]
    made.write_text(json.dumps({"channels": [0, 1, 2], "dtype": "uint16", "bands": figures}))
    normalize = SimpleNamespace(mean=None, std=None, stats=str(made))
    assert pixels_of([0, 1, 2], "uint16", normalize=normalize).mean == (100.0, 101.0, 102.0)  # its own: taken
    with pytest.raises(ConfigError, match=r"data.normalize.stats.*made for data.channels=\[0,1,2\] data.dtype=uint16, "
                                          r"and this run reads data.channels=\[3,4,5\] data.dtype=uint16"):
        pixels_of([3, 4, 5], "uint16", normalize=normalize)
    with pytest.raises(ConfigError, match=r"data.dtype=uint16, and this run reads data.channels=\[0,1,2\] "
                                          "data.dtype=uint8"):
        pixels_of([0, 1, 2], "uint8", normalize=normalize)
    made.write_text(json.dumps({"channels": "all", "dtype": "uint16", "bands": figures}))
    assert pixels_of([0, 1, 2], "uint16", normalize=normalize).std == (5.0, 5.0, 5.0)  # all of 3: the same bands
    made.write_text(json.dumps({"bands": figures}))  # an older one, recording neither: taken
    assert pixels_of([3, 4, 5], "uint16", normalize=normalize).mean == (100.0, 101.0, 102.0)
