"""app/data/pixels/images.py: every supported mode and format → RGB uint8, draft decode, EXIF, bad files."""

import io
import pickle

import numpy as np
import pytest
from forged import declaring, png_declaring
from PIL import Image, ImageOps

from app.data.pixels import images
from app.data.pixels.images import Decode, DecodeError, Pixels, _to_rgb, decoded, draft_scale, load_rgb, read_bytes
from app.data.source import FileSplit
from app.errors import BadSampleError


def _check_rgb(arr: np.ndarray, height: int, width: int) -> None:
    assert arr.dtype == np.uint8
    assert arr.shape == (height, width, 3)
    assert arr.flags.c_contiguous and arr.flags.writeable


def _mode(path) -> str:
    with Image.open(path) as img:
        return img.mode


def _palette_with_transparency() -> Image.Image:
    img = Image.new("P", (6, 4), 1)
    img.putpalette([0, 0, 0, 200, 30, 60] + [0, 0, 0] * 254)
    img.info["transparency"] = 0
    return img


def _cmyk() -> Image.Image:
    return Image.new("CMYK", (6, 4), (0, 255, 255, 0))  # no black ink, full magenta+yellow: red


# (name, image, format, expected pixel or None when lossy)
CASES = [
    ("L png", Image.new("L", (6, 4), 77), "PNG", (77, 77, 77)),
    ("LA png", Image.new("LA", (6, 4), (90, 10)), "PNG", (90, 90, 90)),
    ("1 bmp", Image.new("1", (6, 4), 1), "BMP", (255, 255, 255)),
    ("P transparency png", _palette_with_transparency(), "PNG", (200, 30, 60)),
    ("RGBA png", Image.new("RGBA", (6, 4), (10, 20, 30, 0)), "PNG", (10, 20, 30)),
    ("RGB webp lossless", Image.new("RGB", (6, 4), (1, 2, 3)), "WEBP", (1, 2, 3)),
    ("RGB bmp", Image.new("RGB", (6, 4), (4, 5, 6)), "BMP", (4, 5, 6)),
    ("RGB tiff", Image.new("RGB", (6, 4), (7, 8, 9)), "TIFF", (7, 8, 9)),
    ("L jpeg", Image.new("L", (6, 4), 128), "JPEG", None),
]


@pytest.mark.parametrize("name,img,fmt,pixel", CASES, ids=[c[0] for c in CASES])
def test_modes_and_formats_become_rgb_uint8(tmp_path, name, img, fmt, pixel):
    path = tmp_path / f"img.{fmt.lower()}"
    img.save(path, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    arr = load_rgb(path)
    _check_rgb(arr, 4, 6)
    if pixel is not None:
        assert tuple(arr[2, 3]) == pixel
    else:
        assert np.all(np.abs(arr.astype(int) - 128) <= 2)


def test_cmyk_jpeg_becomes_red(tmp_path):
    path = tmp_path / "cmyk.jpg"
    _cmyk().save(path, "JPEG", quality=95)
    assert _mode(path) == "CMYK"
    arr = load_rgb(path)
    _check_rgb(arr, 4, 6)
    r, g, b = arr[2, 3].astype(int)
    assert r > 230 and g < 25 and b < 25


def test_a_sixteen_bit_png_is_refused_in_a_uint8_run_never_cut_to_8_bits(tmp_path):
    values = np.array([[0, 40000, 65535, 256]], dtype=np.uint16)
    path = tmp_path / "deep.png"
    Image.fromarray(values).save(path)
    assert _mode(path) == "I;16"
    with pytest.raises(DecodeError, match="16-bit image.*data.dtype=uint16"):
        load_rgb(path)
    kept = decoded(read_bytes(path), Decode(pixels=Pixels(channels="all", bands=1, dtype="uint16")))
    assert kept[0, :, 0].tolist() == [0, 40000, 65535, 256]  # negative control: a uint16 run keeps every bit


@pytest.mark.parametrize("mode", ["I;16", "I;16B", "I"])
def test_sixteen_bit_pillow_modes_keep_their_values(mode):
    img = Image.fromarray(np.full((3, 5), 40000, dtype=np.uint16))
    img = img.convert("I") if mode == "I" else img
    if mode == "I;16B":
        img = Image.frombytes("I;16B", (5, 3), np.full((3, 5), 40000, ">u2").tobytes())
    grey = _to_rgb(img)  # the Pillow path's own samples, before the run's bands and type
    assert grey.dtype == np.uint16 and grey.shape == (3, 5) and np.all(grey == 40000)


def test_float_images_are_refused_naming_their_type():
    with pytest.raises(DecodeError, match="32-bit floats"):
        _to_rgb(Image.fromarray(np.array([[0.0, 0.5, 1.0]], dtype=np.float32)))


def _exif_rotated_jpeg(path, width, height):
    """Top half red, bottom half blue, stored with EXIF orientation 6 (display rotated 90° CW)."""
    arr = np.zeros((height, width, 3), np.uint8)
    arr[: height // 2] = (255, 0, 0)
    arr[height // 2:] = (0, 0, 255)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(arr).save(path, "JPEG", quality=95, exif=exif)


def test_exif_orientation_is_applied(tmp_path):
    path = tmp_path / "rotated.jpg"
    _exif_rotated_jpeg(path, 40, 20)
    arr = load_rgb(path)
    _check_rgb(arr, 40, 20)  # width and height swapped
    # Rotated clockwise, the stored top (red) is now on the right, the bottom (blue) on the left.
    assert arr[20, 17, 0] > 200 and arr[20, 17, 2] < 50
    assert arr[20, 2, 2] > 200 and arr[20, 2, 0] < 50


def test_exif_orientation_is_applied_after_draft(tmp_path):
    path = tmp_path / "rotated.jpg"
    _exif_rotated_jpeg(path, 1024, 512)
    # short side 512, 512 / 4 = 128 >= 128: decoded at 256×128, then turned upright.
    _check_rgb(load_rgb(path, min_short_side=128), 256, 128)


def _pillow_alone(path, min_short_side=None) -> np.ndarray:
    """The decode through Pillow only: draft, load, EXIF orientation, RGB."""
    with Image.open(path) as img:
        scale = draft_scale(img.width, img.height, min_short_side) if min_short_side else 1
        if scale > 1:
            img.draft("RGB", (img.width // scale, img.height // scale))
        img.load()
        return np.asarray(ImageOps.exif_transpose(img).convert("RGB"))


@pytest.mark.parametrize("min_short", [None, 90, 150])
@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_jpeg_fast_path_gives_pillows_pixels(tmp_path, monkeypatch, orientation, mode, min_short):
    """RGB and greyscale JPEGs go through OpenCV: the same pixels as Pillow's draft, decode and
    exif_transpose, for every orientation (noise, so any flip or turn shows) and draft scale."""
    rng = np.random.default_rng(orientation)
    path = tmp_path / "photo.jpg"
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(rng.integers(0, 256, (300, 420, 3), dtype=np.uint8)).convert(mode).save(
        path, "JPEG", quality=90, exif=exif)
    fast = []
    decode = images._decode_jpeg
    monkeypatch.setattr(images, "_decode_jpeg", lambda raw, scale: fast.append(decode(raw, scale)) or fast[-1])
    got, want = load_rgb(path, min_short), _pillow_alone(path, min_short)
    assert fast and fast[0] is got  # OpenCV decoded it, not the fallback
    _check_rgb(got, *want.shape[:2])
    assert np.array_equal(got, want)


@pytest.mark.parametrize("min_short", [None, 100])
@pytest.mark.parametrize("encoding", [{"subsampling": 0}, {"subsampling": 1}, {"subsampling": 2},
                                      {"progressive": True}, {"quality": 100, "optimize": True},
                                      {"restart_marker_blocks": 4}], ids=str)
def test_jpeg_fast_path_gives_pillows_pixels_for_every_encoding(tmp_path, encoding, min_short):
    path = tmp_path / "photo.jpg"
    Image.fromarray(np.random.default_rng(5).integers(0, 256, (301, 419, 3), dtype=np.uint8)).save(
        path, "JPEG", **encoding)
    assert np.array_equal(load_rgb(path, min_short), _pillow_alone(path, min_short))


def test_cmyk_jpegs_and_those_opencv_refuses_go_through_pillow(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(images, "_decode_jpeg", lambda raw, scale: calls.append(scale))
    path = tmp_path / "cmyk.jpg"
    _cmyk().save(path, "JPEG")
    _check_rgb(load_rgb(path), 4, 6)
    assert calls == []  # CMYK is Pillow's to convert
    path = tmp_path / "rgb.jpg"
    Image.new("RGB", (6, 4), (0, 200, 0)).save(path, "JPEG")
    assert load_rgb(path)[0, 0, 1] > 150 and calls == [1]  # OpenCV turned it down (None): Pillow decodes


@pytest.mark.parametrize("width,height,min_short,expected", [
    (1024, 1024, 128, 8), (1024, 1024, 129, 4), (1024, 1024, 200, 4), (1024, 1024, 256, 4),
    (1024, 1024, 257, 2), (1024, 1024, 512, 2), (1024, 1024, 513, 1), (1024, 1024, 2000, 1),
    (1001, 700, 88, 8), (1001, 700, 89, 4), (4, 5, 1, 4), (7, 9, 1, 4), (3, 3, 1, 2)])
def test_draft_scale_rule(width, height, min_short, expected):
    assert draft_scale(width, height, min_short) == expected


@pytest.fixture(scope="module")
def data_big_jpeg(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "big.jpg"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (1024, 1024, 3), dtype=np.uint8)).save(path, quality=90)
    return path


@pytest.mark.parametrize("min_short,side", [(None, 1024), (128, 128), (200, 256), (512, 512),
                                            (600, 1024), (1024, 1024), (5000, 1024)])
def test_draft_decode_size(data_big_jpeg, min_short, side):
    _check_rgb(load_rgb(data_big_jpeg, min_short_side=min_short), side, side)


@pytest.mark.parametrize("width,height,min_short", [(1001, 700, 88), (1001, 700, 89), (999, 1023, 64),
                                                    (333, 517, 40), (640, 480, 61)])
def test_draft_decode_never_goes_below_target(tmp_path, width, height, min_short):
    path = tmp_path / "odd.jpg"
    Image.new("RGB", (width, height), (9, 99, 199)).save(path)
    arr = load_rgb(path, min_short_side=min_short)
    scale = draft_scale(width, height, min_short)
    assert arr.shape[:2] == (-(-height // scale), -(-width // scale))
    assert min(arr.shape[:2]) >= min_short


def test_png_is_never_drafted(tmp_path):
    path = tmp_path / "big.png"
    Image.new("RGB", (512, 256), 5).save(path)
    _check_rgb(load_rgb(path, min_short_side=32), 256, 512)


def _jpeg_bytes() -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def _png_bytes() -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(2)
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


BAD_FILES = [
    ("empty.jpg", b"", "empty file"),
    ("garbage.jpg", b"this is not an image at all" * 10, "cannot identify image file"),
    ("truncated.jpg", _jpeg_bytes()[: len(_jpeg_bytes()) // 2], "truncated JPEG"),
    ("header-only.jpg", _jpeg_bytes()[:200], "truncated image"),
    ("truncated.png", _png_bytes()[: len(_png_bytes()) // 2], "truncated PNG"),
]


@pytest.mark.parametrize("name,content,reason", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_files_raise_short_reason(tmp_path, name, content, reason):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DecodeError) as err:
        load_rgb(path)
    assert str(err.value) == reason

    split = FileSplit([str(tmp_path / "ok.png"), str(path)], [0, 1])
    with pytest.raises(BadSampleError) as bad:
        split.read(1)
    assert (bad.value.index, bad.value.where, bad.value.reason) == (1, str(path), reason)
    assert str(path) in str(bad.value)


def test_missing_file_is_a_bad_sample(tmp_path):
    split = FileSplit([str(tmp_path / "gone.jpg")], [0])
    with pytest.raises(BadSampleError) as bad:
        split.read(0)
    assert bad.value.reason == "No such file or directory"
    assert bad.value.where == str(tmp_path / "gone.jpg")


def test_file_split_reads_pickles_and_checks_labels(tmp_path):
    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"{i}.png"))
        Image.new("RGB", (5, 4), (i, 0, 0)).save(paths[-1])
    split = pickle.loads(pickle.dumps(FileSplit(paths, [2, 0, 1])))
    assert len(split) == 3
    assert split.labels.dtype == np.int64 and split.labels.tolist() == [2, 0, 1]
    assert split.read(2)[0, 0].tolist() == [2, 0, 0]
    assert split.describe(1) == paths[1]
    with pytest.raises(ValueError, match="2 labels for 3 samples"):
        FileSplit(paths, [0, 1])


@pytest.mark.parametrize("mode", ["RGB", "L", "CMYK"])
@pytest.mark.parametrize("encoding", [{}, {"progressive": True}, {"restart_marker_blocks": 2},
                                      {"exif": True}, {"icc_profile": b"\0" * 3000}, {"comment": "x" * 100}],
                         ids=str)
def test_jpeg_frame_header_matches_pillow(tmp_path, mode, encoding):
    """The frame header read without Pillow: Pillow's size, and its mode's channel count."""
    path = tmp_path / "photo.jpg"
    if encoding.get("exif"):
        exif = Image.Exif()
        exif[0x0112] = 6
        encoding = {"exif": exif}
    Image.new(mode, (37, 23)).save(path, "JPEG", **encoding)
    with Image.open(path) as img:
        want = (img.width, img.height, len(img.getbands()))
    assert images.jpeg_frame(path.read_bytes()) == want


def test_jpeg_frame_header_of_broken_markers_is_none():
    raw = _jpeg_bytes()
    sof = raw.index(b"\xff\xc0")
    assert images.jpeg_frame(raw[:sof + 6]) is None  # cut inside the frame header
    assert images.jpeg_frame(raw[:2] + b"\x12\x34" + raw[2:]) is None  # not a marker where one must be
    no_frame = raw[:sof] + raw[raw.index(b"\xff\xda"):]  # the scan starts with no frame header before it
    assert images.jpeg_frame(no_frame) is None
    assert images.jpeg_frame(raw[:2] + b"\xff\xff" + raw[2:]) == images.jpeg_frame(raw) == (64, 64, 3)  # fill


def test_a_decompression_bomb_is_refused_before_decoding(tmp_path):
    """A 630-byte JPEG declaring 30000×30000 decoded to 2.7 GB on the fast path."""
    bomb, png = tmp_path / "bomb.jpg", tmp_path / "bomb.png"
    declaring(bomb, 30000, 30000)
    png_declaring(png, 30000, 30000)
    assert bomb.stat().st_size < 1000
    with pytest.raises(DecodeError, match=r"declares 30000×30000 = 900 M pixels, above data.max_image_pixels"):
        load_rgb(bomb)
    with pytest.raises(DecodeError, match=r"declares 900 M pixels, above Pillow's own limit"):  # Pillow refuses first
        load_rgb(png)
    with pytest.raises(BadSampleError, match="bomb.jpg.*above data.max_image_pixels=89478485"):
        FileSplit([str(bomb)], [0]).read(0)


def test_the_pixel_limit_is_configurable_on_both_paths(tmp_path):
    jpeg, png = tmp_path / "a.jpg", tmp_path / "a.png"
    Image.new("RGB", (100, 100), (1, 2, 3)).save(jpeg)
    Image.new("RGB", (100, 100), (1, 2, 3)).save(png)
    cmyk = tmp_path / "cmyk.jpg"
    Image.new("CMYK", (100, 100), (0, 255, 255, 0)).save(cmyk)  # a JPEG the fast path leaves to Pillow
    for path in (jpeg, png, cmyk):
        with pytest.raises(DecodeError, match="above data.max_image_pixels=9999"):
            load_rgb(path, max_pixels=9999)
        assert load_rgb(path, max_pixels=10000).shape == (100, 100, 3)  # at the limit: fine
        assert load_rgb(path, max_pixels=None).shape == (100, 100, 3)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_a_huge_file_is_refused_from_its_header_without_being_read(tmp_path, monkeypatch):
    big = tmp_path / "big.png"
    png_declaring(big, 12000, 12000)
    with open(big, "ab") as f:  # a large file: only its header may be read
        f.write(b"\0" * (4 * images.HEAD_BYTES))
    reads = []

    class Counted(io.FileIO):
        def read(self, n=-1):
            reads.append(n)
            return super().read(n)

    monkeypatch.setattr(images, "open", lambda path, mode: Counted(path, "r"), raising=False)
    with pytest.raises(DecodeError, match="12000×12000 = 144 M pixels, above data.max_image_pixels"):
        images.read_bytes(big)
    assert reads == [images.HEAD_BYTES]  # the header, and nothing after it
    reads.clear()
    assert len(images.read_bytes(big, max_pixels=None)) == big.stat().st_size  # no limit: read whole
    assert reads == [images.HEAD_BYTES, -1]


def test_a_device_or_pipe_named_as_an_image_is_refused_before_it_is_opened(tmp_path):
    """A link to /dev/urandom would be read for ever; opening a pipe waits for a writer."""
    import os

    from app.data.pixels.headers import header_draft

    (tmp_path / "random.png").symlink_to("/dev/urandom")
    os.mkfifo(tmp_path / "pipe.jpg")
    real = tmp_path / "real.png"
    Image.new("RGB", (4, 3)).save(real)
    for name in ("random.png", "pipe.jpg"):
        with pytest.raises(DecodeError, match="not a regular file"):
            images.read_bytes(tmp_path / name)
        assert header_draft(tmp_path / name, None) is None
    assert load_rgb(real).shape == (3, 4, 3) and header_draft(real, None) == (4, 3, 1)  # negative control


def test_a_refusal_states_the_limit_that_refused_it(tmp_path):
    """A small limit names the pixel count exactly (never "0 M"); above Pillow's own hard limit
    (twice its default) the message names that limit, since raising data.max_image_pixels
    cannot lift it, and never claims a raised limit was passed."""
    small, huge = tmp_path / "small.png", tmp_path / "huge.png"
    Image.new("RGB", (32, 32)).save(small)
    png_declaring(huge, 15000, 15000)  # 225 M: above Pillow's 179 M whatever the setting
    with pytest.raises(DecodeError, match=r"declares 32×32 = 1,024 pixels, above data.max_image_pixels=500 "):
        load_rgb(small, max_pixels=500)
    for max_pixels in (images.DEFAULT_MAX_PIXELS, 300_000_000, None):
        with pytest.raises(DecodeError) as refused:
            load_rgb(huge, max_pixels=max_pixels)
        assert "225 M pixels, above Pillow's own limit (178956970)" in str(refused.value)
        assert "above data.max_image_pixels" not in str(refused.value)
        assert "raise data.max_image_pixels" not in str(refused.value)  # advice that would fail
