"""A predicted map written as a pyramidal OME-TIFF: tifffile reads every level, each the one above halved by nearest
neighbour, tiled, with its µm a pixel; written whole or not at all; the scratch folder gone after."""

import numpy as np
import pytest
import tifffile

from app.inference import pyramids
from app.inference.pyramids import Canvas, write_pyramid


def test_every_level_reads_back_halved_tiled_and_with_its_resolution(tmp_path):
    rng = np.random.default_rng(0)
    classes = rng.integers(0, 4, (1300, 1100)).astype(np.uint8)
    with pyramids.scratch(tmp_path / "out") as folder:
        canvas = Canvas(tmp_path / "out" / folder, classes.shape, "uint8", 255)
        for top in range(0, 1300, 97):  # bands of any height, as finished rows arrive
            canvas.write_rows(top, classes[top:top + 97])
        write_pyramid(canvas, tmp_path / "out" / "map.tif", 0.5, name="slide.svs")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["map.tif"]  # the scratch folder removed
    with tifffile.TiffFile(tmp_path / "out" / "map.tif") as tif:
        levels = tif.series[0].levels
        assert tif.is_ome and len(levels) == 3 and all(level.keyframe.is_tiled for level in levels)
        expected = classes
        for k, level in enumerate(levels):
            assert np.array_equal(level.asarray(), expected), k
            unit, (per, one) = level.keyframe.tags["ResolutionUnit"].value, level.keyframe.tags["XResolution"].value
            assert unit == 3 and per / one == pytest.approx(1e4 / (0.5 * 2**k))
            expected = expected[::2, ::2]
        assert 'PhysicalSizeX="0.5"' in tif.ome_metadata


def test_a_map_never_written_leaves_its_fill_and_a_failed_write_no_file(tmp_path, monkeypatch):
    canvas = Canvas(tmp_path, (300, 200), "uint8", 7)
    canvas.write_rows(0, np.zeros((10, 200), np.uint8))
    write_pyramid(canvas, tmp_path / "a.tif", None, name="a")
    read = tifffile.imread(tmp_path / "a.tif")
    assert (read[:10] == 0).all() and (read[10:] == 7).all()
    monkeypatch.setattr(pyramids, "_tiles", lambda level: iter([np.zeros((1, 1), np.uint8)]))  # a tile short
    with pytest.raises(Exception):  # noqa: B017 - tifffile's own error for the missing tiles
        write_pyramid(canvas, tmp_path / "b.tif", None, name="b")
    assert not (tmp_path / "b.tif").exists() and not list(tmp_path.glob("*.tmp*"))
