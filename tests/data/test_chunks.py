"""A worker's decoded chunks: regions assembled from them are the direct read's, bit for bit, at every edge and layout;
each chunk that overlapping reads share is decoded once; what is kept stays within its budget."""

import numpy as np
import pytest
import tifffile

from app.data.slides import regions
from app.data.slides.chunks import DecodedChunks
from app.data.slides.regions import read_region, slide_of

LAYOUTS = {  # (pixels, tifffile's options): interleaved RGB, planar 16-bit bands, one band in tall tiles
    "rgb": ((300, 417, 3), np.uint8, {"tile": (64, 64), "photometric": "rgb"}),
    "planar": ((6, 300, 417), np.uint16, {"tile": (32, 48), "photometric": "minisblack", "planarconfig": "separate"}),
    "gray": ((300, 417), np.uint8, {"tile": (64, 32), "photometric": "minisblack"}),
}


@pytest.fixture(autouse=True)
def no_chunk_kept_between_tests():
    regions.close_open_files()
    yield
    regions.close_open_files()


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_region_from_kept_chunks_is_the_direct_read(tmp_path, name):
    shape, dtype, options = LAYOUTS[name]
    rng = np.random.default_rng(0)
    path = tmp_path / f"{name}.tif"
    tifffile.imwrite(path, rng.integers(0, np.iinfo(dtype).max, shape, dtype), **options)
    slide = slide_of(path, 2**24)
    for _ in range(60):  # corners anywhere, regions past the right and bottom edges too
        corner = int(rng.integers(0, 300)), int(rng.integers(0, 417))
        size = int(rng.integers(1, 130)), int(rng.integers(1, 130))
        direct = read_region(slide, 0, corner, size)
        kept = read_region(slide, 0, corner, size, cache_bytes=int(rng.choice([40_000, 10**7])))
        assert kept.dtype == direct.dtype and kept.shape == direct.shape and np.array_equal(kept, direct), corner
    assert 0 < regions._chunks.held <= 10**7


class CountingLevel:
    """A level's zarr array that counts the chunks read through it."""

    def __init__(self, pixels: np.ndarray, chunk: int):
        self.pixels, self.chunks, self.shape, self.dtype = pixels, (chunk, chunk, pixels.shape[2]), pixels.shape, \
            pixels.dtype
        self.reads = 0

    def __getitem__(self, window):
        self.reads += 1
        return self.pixels[window]


def tiles_over(cache: DecodedChunks, level: CountingLevel, budget: int) -> np.ndarray:
    """A 256² tile every 192 pixels over a 1024² level, row by row (predict's overlapping tiles)."""
    tiles = [cache.region(("slide.tif", 0), (level, "YXS"), budget, ((top, left), (256, 256)))
             for top in range(0, 769, 192) for left in range(0, 769, 192)]
    assert all(np.array_equal(tile, level.pixels[top:top + 256, left:left + 256]) for tile, (top, left) in
               zip(tiles, [(t, left) for t in range(0, 769, 192) for left in range(0, 769, 192)], strict=True))
    return level.reads


def test_overlapping_tiles_decode_each_chunk_once_within_the_budget():
    pixels = np.random.default_rng(1).integers(0, 256, (1024, 1024, 3), np.uint8)
    chunk_bytes = 128 * 128 * 3
    cache = DecodedChunks()
    # four chunk rows kept (a row of tiles spans three): each of the 64 chunks read once
    assert tiles_over(cache, CountingLevel(pixels, 128), 32 * chunk_bytes) == 64
    assert cache.held <= 32 * chunk_bytes
    # negative control: a budget of a few chunks forgets a row's chunks before the next row of tiles needs them
    few = DecodedChunks()
    assert tiles_over(few, CountingLevel(pixels, 128), 3 * chunk_bytes) > 100
    assert few.held <= 3 * chunk_bytes
    # a chunk larger than the budget: not kept, the caller reads the region directly
    assert DecodedChunks().region(("slide.tif", 0), (CountingLevel(pixels, 128), "YXS"), chunk_bytes - 1,
                                  ((0, 0), (8, 8))) is None


def test_a_file_written_again_is_read_again(tmp_path):
    path, rng = tmp_path / "slide.tif", np.random.default_rng(2)
    first, second = (rng.integers(0, 256, (128, 128, 3), np.uint8) for _ in range(2))
    tifffile.imwrite(path, first, tile=(64, 64), photometric="rgb")
    assert np.array_equal(read_region(slide_of(path, 2**24), 0, (10, 10), (50, 50), cache_bytes=10**6),
                          first[10:60, 10:60])
    regions.close_open_files()  # the file closed, as a worker does past its open files; its chunks still kept
    tifffile.imwrite(path, second, tile=(64, 64), photometric="rgb")
    assert regions._chunks.held == 0  # closing drops them too: kept again below, from the file as written now
    read_region(slide_of(path, 2**24), 0, (0, 0), (8, 8), cache_bytes=10**6)
    tifffile.imwrite(path, first, tile=(64, 64), photometric="rgb")
    regions._open.close_all()  # closed without dropping the chunks: the key (its size and time) tells them apart
    assert regions._chunks.held > 0
    assert np.array_equal(read_region(slide_of(path, 2**24), 0, (0, 0), (8, 8), cache_bytes=10**6), first[:8, :8])
