"""app/data/headers.py: what a split's files will hold decoded, from their headers alone."""

import numpy as np
from forged import declaring, png_declaring
from PIL import Image

from app.data import images
from app.data.headers import decode_bytes, header_draft, largest_decode_bytes
from app.data.images import Decode
from app.data.source import ArraySplit, FileSplit


def test_largest_decode_reads_headers_under_the_draft_rule(tmp_path):
    paths = []
    for name, size in (("big.jpg", (400, 300)), ("small.jpg", (100, 100))):
        paths.append(tmp_path / name)
        Image.new("RGB", size).save(paths[-1])
    (tmp_path / "bad.jpg").write_bytes(b"not an image")
    split = FileSplit([*paths, tmp_path / "bad.jpg"], [0, 0, 0])
    assert largest_decode_bytes(split, Decode()) == (400 * 300 * 3, 0)  # a full decode; the bad file passed over
    assert largest_decode_bytes(split, Decode(100)) == (200 * 150 * 3, 0)  # halved: its short side stays ≥ 100
    np.save(tmp_path / "rows.npy", np.zeros((4, 32, 32, 3), np.uint8))
    rows = ArraySplit(tmp_path / "rows.npy", [0, 1], [0, 0], "train")
    assert largest_decode_bytes(rows, Decode(100)) == (32 * 32 * 3, 0)


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
        assert largest_decode_bytes(split, Decode(None, max_pixels)) == (
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
    assert largest_decode_bytes(split, Decode()) == (80 * 30 * 3, 40 * 30 * 5)  # each figure's largest
