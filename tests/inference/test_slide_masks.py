"""A slide predicted whole: its tiles cover its tissue to the edge; blended scores are the tiles' own where they
agree, whatever the overlap, and a pixel deep in one tile takes that tile's; a band of rows, never the map, held."""

from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from slides import write_annotated_slides

from app.inference.slide_masks import FLOOR, RowBlender, blend_weights, tiling_of
from app.schema.data import PatchesConfig

TILE = 32


@pytest.fixture(scope="module")
def slide(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("slide")
    write_annotated_slides(root, train=1, val=0, side=256, tile=64)
    return root / "slides" / "train" / "train-0.tif"


def patches(**given):
    return OmegaConf.structured(PatchesConfig(size=[TILE, TILE], level=0, **given))


@pytest.mark.parametrize("overlap, stride", [(0.0, 32), (0.25, 24), (0.5, 16)])
def test_tiles_step_by_the_overlap_end_flush_with_the_edge_and_lie_on_tissue(slide, overlap, stride):
    every = tiling_of(str(slide), patches(min_foreground=0.0), overlap)
    assert every.shape == (256, 256) and every.tile == (TILE, TILE) and every.scale == (1.0, 1.0)
    tops = [top for top, _ in every.rows]
    assert tops[:3] == [0, stride, 2 * stride] and tops[-1] == 256 - TILE and all(len(r) == len(tops) for _, r in
                                                                                   every.rows)
    on_tissue = tiling_of(str(slide), patches(), overlap)  # data.patches' mask: glass-only tiles left out
    assert 0 < on_tissue.tiles < every.tiles


def test_blended_scores_are_the_tiles_where_they_agree_and_a_tiles_own_at_its_centre(slide):
    tiling = tiling_of(str(slide), patches(min_foreground=0.0), 0.5)
    yy, xx = np.mgrid[0:256, 0:256]
    field = np.stack([np.sin(yy / 40.0) ** 2, np.cos(xx / 30.0) ** 2], axis=-1).astype(np.float32)
    for blend in ("gaussian", "mean"):
        blender, out = RowBlender(tiling, 2, blend_weights(tiling.tile, blend)), np.zeros_like(field)
        for top, lefts in tiling.rows:
            for row_top, scores, covered in blender.finish_to(top):
                out[row_top:row_top + len(scores)] = scores
                assert covered.all()
            for left in lefts:
                blender.add(top, left, field[top:top + TILE, left:left + TILE])
            assert blender.scores.shape == (TILE, 256, 2)  # a band of rows, however tall the map
        for row_top, scores, _ in blender.finish_to(256):
            out[row_top:row_top + len(scores)] = scores
        np.testing.assert_allclose(out, field, atol=1e-5)
    # tiles that disagree: each pixel at a tile's centre takes (mostly) that tile's score under gaussian weights
    blender = RowBlender(tiling, 1, blend_weights(tiling.tile, "gaussian"))
    out = np.zeros((256, 256))
    for top, lefts in tiling.rows:
        for row_top, scores, _ in blender.finish_to(top):
            out[row_top:row_top + len(scores)] = scores[..., 0]
        for left in lefts:
            blender.add(top, left, np.full((TILE, TILE, 1), float(left // 16), np.float32))
    for row_top, scores, _ in blender.finish_to(256):
        out[row_top:row_top + len(scores)] = scores[..., 0]
    assert abs(out[100, 16 * 5 + 16] - 5) < 0.2  # the centre of the tile at left=80 (negative: mean gives 5.5 there)


def test_weights_gaussian_centre_first_mean_alike():
    gaussian, mean = blend_weights((32, 32), "gaussian"), blend_weights((32, 32), "mean")
    assert (mean == 1).all() and gaussian.max() == pytest.approx(1.0) and gaussian.min() >= FLOOR
    assert gaussian[15:17, 15:17].min() > gaussian[0, 0] and gaussian[0, 16] < 0.05


def test_every_row_of_the_map_is_handed_on_once_gaps_between_rows_of_tiles_and_below_the_last_too(slide):
    tiling = tiling_of(str(slide), patches(), 0.0)  # tissue only: rows of tiles with glass between them
    tops = [top for top, _ in tiling.rows]
    assert tops[0] > 0 or any(b - a > TILE for a, b in zip(tops, tops[1:], strict=False)) or tops[-1] < 256 - TILE
    blender, handed = RowBlender(tiling, 1, blend_weights(tiling.tile, "mean")), []
    for top, lefts in tiling.rows:
        handed += [(row_top, len(scores), covered.any()) for row_top, scores, covered in blender.finish_to(top)]
        for left in lefts:
            blender.add(top, left, np.ones((TILE, TILE, 1), np.float32))
    handed += [(row_top, len(scores), covered.any()) for row_top, scores, covered in blender.finish_to(256)]
    rows = [row for row_top, count, _ in handed for row in range(row_top, row_top + count)]
    assert rows == list(range(256))  # each once, in order
    assert any(not covered for *_, covered in handed)  # the rows no tile reached among them, uncovered
