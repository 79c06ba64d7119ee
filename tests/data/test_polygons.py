"""GeoJSON polygons as QuPath exports them: read into an index, filled into a patch by each pixel's centre, holes
kept, a region inside another filled over it, only the polygons that touch the patch drawn."""

import json

import numpy as np
import pytest

from app.data.pixels.decode import DecodeError
from app.data.slides import polygons
from app.data.slides.polygons import read_polygons

NAMES = ["glass", "stroma", "tumour"]


def feature(rings, name: str | None, kind: str = "Polygon") -> dict:
    properties = {"objectType": "annotation"} if name is None else {"classification": {"name": name}}
    return {"type": "Feature", "geometry": {"type": kind, "coordinates": rings}, "properties": properties}


def square(x0, y0, x1, y1) -> list:
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]


def written(tmp_path, features, name="a.geojson", collection=True):
    path = tmp_path / name
    path.write_text(json.dumps({"type": "FeatureCollection", "features": features} if collection else features))
    return path


def centres_inside(box, corner, scale, shape) -> np.ndarray:
    """NumPy's own answer: which pixels' centres (level 0) lie inside the axis-aligned `box`."""
    (top, left), (sy, sx) = corner, scale
    ys = top + (np.arange(shape[0]) + 0.5) * sy
    xs = left + (np.arange(shape[1]) + 0.5) * sx
    x0, y0, x1, y1 = box
    return ((ys[:, None] > y0) & (ys[:, None] < y1)) & ((xs[None, :] > x0) & (xs[None, :] < x1))


def test_a_polygon_with_a_hole_fills_by_pixel_centres_at_any_scale(tmp_path):
    path = written(tmp_path, [feature([square(10, 20, 90, 100), square(40, 50, 60, 70)], "stroma")])
    index = read_polygons(path, NAMES)
    for corner, scale in (((0, 0), (1.0, 1.0)), ((8, 4), (2.0, 2.0)), ((30, 30), (0.5, 0.5))):
        mask = index.fill(np.full((32, 32), 255, np.uint8), corner, scale)
        outer = centres_inside((10, 20, 90, 100), corner, scale, mask.shape)
        hole = centres_inside((40, 50, 60, 70), corner, scale, mask.shape)
        expected = np.where(outer & ~hole, 1, 255)
        assert (mask == expected).mean() > 0.97, (corner, scale)  # the edges' pixels are the rasteriser's
        inner = centres_inside((42, 52, 58, 68), corner, scale, mask.shape)  # the hole, 2 pixels in from its edge
        if inner.any():  # unannotated, though inside the outer ring (the negative control: filled without holes)
            assert (mask[inner] == 255).all() and outer[inner].all()


def test_a_region_inside_another_keeps_its_class_whatever_the_files_order(tmp_path):
    big, small = feature([square(0, 0, 64, 64)], "stroma"), feature([square(16, 16, 32, 32)], "tumour")
    for order in ([big, small], [small, big]):
        mask = read_polygons(written(tmp_path, order), NAMES).fill(np.zeros((64, 64), np.uint8), (0, 0), (1, 1))
        assert (mask[18:30, 18:30] == 2).all() and (mask[40:60, 40:60] == 1).all()
        assert set(np.unique(mask)) == {1, 2}


def test_a_multipolygon_and_a_list_of_features_read_and_what_has_no_area_or_class_is_passed_over(tmp_path):
    features = [feature([[square(0, 0, 8, 8)], [square(20, 20, 28, 28)]], "tumour", "MultiPolygon"),
                feature([square(0, 0, 60, 60)], None),  # QuPath's unclassified outline
                {"type": "Feature", "geometry": {"type": "Point", "coordinates": [3, 3]},
                 "properties": {"classification": {"name": "stroma"}}}]
    index = read_polygons(written(tmp_path, features, collection=False), NAMES)
    assert len(index.rings) == 2 and index.skipped == 2 and list(index.classes) == [2, 2]
    mask = index.fill(np.zeros((32, 32), np.uint8), (0, 0), (1, 1))
    assert mask[4, 4] == 2 and mask[24, 24] == 2 and mask[14, 14] == 0


def test_only_the_polygons_whose_box_touches_the_patch_are_filled(tmp_path, monkeypatch):
    many = [feature([square(x, y, x + 10, y + 10)], "stroma") for x in range(0, 1000, 20) for y in range(0, 1000, 20)]
    index = read_polygons(written(tmp_path, many), NAMES)
    calls = []
    real = polygons.cv2.fillPoly
    monkeypatch.setattr(polygons.cv2, "fillPoly", lambda *a, **k: calls.append(1) or real(*a, **k))
    mask = index.fill(np.zeros((32, 32), np.uint8), (500, 500), (1, 1))
    assert len(index.rings) == 2500 and 0 < len(calls) <= 9  # a 32² patch touches at most 3 × 3 of the squares
    assert mask[5, 5] == 1 and mask[15, 15] == 0


@pytest.mark.parametrize("text, said", [
    ("{not json", "cannot read it as GeoJSON"),
    ('{"type": "Topology"}', "FeatureCollection, a Feature or a list of Features"),
    (json.dumps({"type": "FeatureCollection", "features": [feature([square(0, 0, 5, 5)], "necrosis")]}),
     "its feature 0 is of class 'necrosis', not one of data.classes ['glass', 'stroma', 'tumour']"),
    (json.dumps({"type": "FeatureCollection", "features": [feature([[[0, 0], [1, "x"], [2, 2]]], "stroma")]}),
     "its feature 0 has a ring that is not a list of [x, y] points"),
])
def test_what_is_not_such_a_file_is_refused_naming_why(tmp_path, text, said):
    path = tmp_path / "bad.geojson"
    path.write_text(text)
    with pytest.raises(DecodeError, match=None) as refused:
        read_polygons(path, NAMES)
    assert said in str(refused.value)
