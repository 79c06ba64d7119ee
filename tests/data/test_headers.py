"""app/data/pixels/headers.py: what a split's files will hold decoded, from their headers alone, as each split asks."""

from types import SimpleNamespace

import numpy as np
import tifffile
from forged import declaring, png_declaring
from PIL import Image

from app.data.pixels import images, tiff
from app.data.pixels.band_stats import BandTally
from app.data.pixels.headers import decode_bytes, header_draft
from app.data.pixels.images import Decode
from app.data.slides.patches import GridPatches, layout_of
from app.data.source import ArraySplit, FileSplit


def test_largest_decode_reads_headers_under_the_draft_rule(tmp_path):
    paths = []
    for name, size in (("big.jpg", (400, 300)), ("small.jpg", (100, 100))):
        paths.append(tmp_path / name)
        Image.new("RGB", size).save(paths[-1])
    (tmp_path / "bad.jpg").write_bytes(b"not an image")
    split = FileSplit([*paths, tmp_path / "bad.jpg"], [0, 0, 0])
    assert split.largest_decode_bytes(Decode()) == (400 * 300 * 3, 0)  # a full decode; the bad file passed over
    assert split.largest_decode_bytes(Decode(100)) == (200 * 150 * 3, 0)  # halved: its short side stays ≥ 100
    np.save(tmp_path / "rows.npy", np.zeros((4, 32, 32, 3), np.uint8))
    rows = ArraySplit(tmp_path / "rows.npy", [0, 1], [0, 0], "train")
    assert rows.largest_decode_bytes(Decode(100)) == (32 * 32 * 3, 0)


def test_the_header_scan_leaves_what_the_loader_refuses_to_it(tmp_path):
    """A decompression bomb (above Pillow's own limit, which raises outside OSError) and a file
    above data.max_image_pixels are the loader's to report by the bad-sample policy: the memory
    plan's header scan passes over them, and counts a genuine large file within the limit."""
    small, bomb, huge_png, loop = (tmp_path / n for n in ("small.jpg", "bomb.jpg", "huge.png", "loop.jpg"))
    Image.new("RGB", (100, 80)).save(small)
    declaring(bomb, 30000, 30000)
    png_declaring(huge_png, 40000, 40000)
    loop.symlink_to(loop)
    split = FileSplit([small, bomb, huge_png, loop], [0, 0, 0, 0])
    for max_pixels in (images.DEFAULT_MAX_PIXELS, None):
        assert split.largest_decode_bytes(Decode(None, max_pixels)) == (
            100 * 80 * 3 if max_pixels else 30000 * 30000 * 3, 0)  # null: the JPEG bomb is tried, as the loader would
        assert header_draft(huge_png, None, max_pixels) is None  # beyond Pillow's own limit either way
    assert header_draft(bomb, None, 10**9) == (30000, 30000, 1)  # within a raised limit: counted
    late = tmp_path / "late.jpg"  # a frame header past the first bytes read (large EXIF, ICC, ...)
    Image.new("RGB", (120, 90)).save(late, icc_profile=b"\0" * (2 * images.HEAD_BYTES))
    assert header_draft(late, 45) == (120, 90, 2)
    assert header_draft(small, None, 8000) == (100, 80, 1) and header_draft(small, None, 7999) is None


def test_a_decode_through_pillow_is_planned_with_its_own_copies(tmp_path):
    """The memory plan counts what a decode holds: a JPEG through OpenCV its RGB array alone; a
    file Pillow decodes also Pillow's image in its mode and the RGB conversion of another mode."""
    made = {"rgb.jpg": ("RGB", 0), "grey.jpg": ("L", 0), "cmyk.jpg": ("CMYK", 4 + 4),
            "rgb.png": ("RGB", 4), "grey.png": ("L", 1 + 4), "deep.png": ("I;16", 2 + 16)}
    for name, (mode, _) in made.items():
        Image.new(mode, (40, 30)).save(tmp_path / name)
    for name, (_, pillow) in made.items():
        assert decode_bytes(tmp_path / name, Decode()) == (40 * 30 * 3, 40 * 30 * pillow), name
    assert decode_bytes(tmp_path / "grey.png", Decode(None, 1000)) == (0, 0)  # refused by the limit: the loader's
    Image.new("RGB", (80, 30)).save(tmp_path / "wide.jpg")
    split = FileSplit([tmp_path / "wide.jpg", tmp_path / "grey.png"], [0, 0])
    assert split.largest_decode_bytes(Decode()) == (80 * 30 * 3, 40 * 30 * 5)  # each figure's largest


def test_each_samples_no_data_value_is_its_own_files_and_stats_leave_out_each_its_own(tmp_path):
    """Three GeoTIFFs: no-data 0, none, 7; and a patch split of a tiled one: each sample's value is its own file's, and
    BandTally leaves out an image's own value alone (the untagged file's zeros are pixels)."""
    image = np.array([[[0], [7]], [[9], [9]]], np.uint16)  # (2, 2, 1)
    for name, tag in (("zero.tif", "0"), ("none.tif", None), ("seven.tif", "7")):
        tifffile.imwrite(tmp_path / name, image, photometric="minisblack",
                         extratags=[(42113, "s", 0, tag, True)] if tag else [])
    split = FileSplit([tmp_path / n for n in ("zero.tif", "none.tif", "seven.tif")], [0, 0, 0])
    assert [split.nodata(i) for i in range(3)] == [0.0, None, 7.0]
    tally = BandTally(1, "uint16")
    tally.add(np.stack([image] * 3), [split.nodata(i) for i in range(3)])
    figures = tally.figures()[0]
    assert figures["pixels"] == 3 + 4 + 3 and figures["min"] == 0  # the untagged file's 0 counted
    assert figures["mean"] == (7 + 9 + 9 + (0 + 7 + 9 + 9) + 0 + 9 + 9) / 10
    tiled = tmp_path / "tiled.tif"
    tifffile.imwrite(tiled, np.ones((128, 128, 6), np.uint16), tile=(64, 64), photometric="minisblack",
                     planarconfig="contig", extratags=[(42113, "s", 0, "5", True)])
    grid = SimpleNamespace(size=[64, 64], level=0, downsample=None, mpp=None, mode=SimpleNamespace(value="grid"),
                           stride=None, per_image=None, min_foreground=0.0, mask_bands=None, max_chunk_pixels=2**24,
                           reader=SimpleNamespace(value="auto"))
    patches = GridPatches(FileSplit([tiled], [0]), [layout_of(str(tiled), grid, grid=True)], grid)
    assert len(patches) == 4 and {patches.nodata(i) for i in range(4)} == {5.0}  # its slide's
    assert patches.files() == [str(tiled)] and split.files() == [str(p) for p in split.paths]


def test_a_no_data_value_no_pixel_can_hold_is_none_said_once(tmp_path, caplog, monkeypatch):
    """uint16 GeoTIFFs tagged NaN, -9999, 70000, 1.5 and 'abc': no pixel equals any, so none (one warning a value),
    read alike by the file's and the slide's reader and a copy's kept value; 0 and 65535 are kept."""
    image = np.full((64, 64, 6), 3, np.uint16)
    tags = {"nan": None, "-9999": None, "70000": None, "1.5": None, "abc": None, "0": 0.0, "65535": 65535.0}
    paths = []
    for n, tag in enumerate(tags):
        for copy in range(2):
            paths.append(tmp_path / f"{n}_{copy}.tif")
            tifffile.imwrite(paths[-1], image, photometric="minisblack", tile=(64, 64),
                             extratags=[(42113, "s", 0, tag, True)])
    split = FileSplit(paths, [0] * len(paths))
    monkeypatch.setattr(tiff, "_unheld", set(), raising=False)  # said once a process: this test's own count
    with caplog.at_level("WARNING", logger="app.data.pixels.tiff"):
        found = [split.nodata(i) for i in range(len(paths))]
    assert found == [value for value in tags.values() for _ in range(2)]
    said = [r.getMessage() for r in caplog.records if r.name == "app.data.pixels.tiff"]
    assert len(said) == 5 and all("no value a uint16 pixel can hold" in line for line in said), said
    slide = layout_of(str(paths[0]), SimpleNamespace(
        size=[64, 64], level=0, downsample=None, mpp=None, mode=SimpleNamespace(value="grid"), stride=None,
        per_image=None, min_foreground=0.0, mask_bands=None, max_chunk_pixels=2**24,
        reader=SimpleNamespace(value="auto")), grid=True).slide
    assert slide.nodata is None  # the slide's reader judges it alike
    assert tiff.held_nodata(float("nan"), "uint16", str(tmp_path)) is None  # as a raw copy judges a kept NaN
    tally = BandTally(6, "uint16")
    tally.add(np.stack([image] * len(paths)), found)
    assert tally.figures()[0]["pixels"] == 64 * 64 * len(paths)  # no pixel 0 or 65535: none left out
