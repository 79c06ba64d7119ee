"""A prepared copy of patches (data.patches): each stored patch is the region the slide gives there, its image and
corner kept beside the index; the training patches fixed once, the grid or prepare.patch_draws distinct random ones
an image from (seed, image) alone; a changed patches-<split>.npy is refused. Through the CLI:
tests/cli/test_patches_cli.py."""

from __future__ import annotations

import json
import tarfile

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from slides import write_slides

from app.config import conf_dir, load
from app.data.copies.prepared import prepared_source
from app.data.sources.chosen import load_or_generate_source
from app.errors import ConfigError, DataError
from app.prepare.copy import write_prepared_copy
from app.schema import register
from app.schema.data import PreparedDataConfig

register()
PATCHES = ["data.patches.size=[32,32]", "data.patches.level=1", "data.patches.per_image=6",
           "data.image_size=[32,32]", "prepare.format=raw"]


def prepare_config(*overrides: str):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return load(compose("prepare", overrides=list(overrides)))


@pytest.fixture(scope="module")
def slides(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slides")
    write_slides(folder, per_class=3, side=512)
    return folder


def prepared(slides, out, *given: str):
    config = prepare_config("data=folder", f"data.path={slides}", *PATCHES, f"prepare.out={out}", *given)
    write_prepared_copy(config, workers=0, per_shard=40)
    return config, prepared_source(PreparedDataConfig(path=str(out)))


def test_each_stored_patch_is_its_region_and_keeps_its_image_and_corner(slides, tmp_path):
    config, copy = prepared(slides, tmp_path / "grid")
    source = load_or_generate_source(config.data)  # the slides' own patches: validation is their grid
    val = source.val
    assert len(copy.val) == len(val) and copy.split["patches"]["split_by"] == "image"
    assert copy.val.images.paths == val.images.paths and list(copy.val.images.labels) == list(val.images.labels)
    got = {(int(row["image"]), int(row["x"]), int(row["y"])): i for i, row in enumerate(copy.val.places)}
    assert len(got) == len(val)
    for i in range(len(val)):
        image, top, left = val.where(i)
        stored = copy.val.read(got[(image, left, top)])
        np.testing.assert_array_equal(stored, val.read(i))  # raw: bit for bit the region the slide gives
    assert not np.array_equal(copy.val.read(0), copy.val.read(1))  # negative control: patches differ
    assert list(copy.val.image_of) == [int(row["image"]) for row in copy.val.places]
    # the training split is the grid of every training image, not the random draws of a run on the slides
    assert len(copy.train) == sum(len(layout.cells()) for layout in
                                  load_or_generate_source(prepare_config(
                                      "data=folder", f"data.path={slides}", *PATCHES,
                                      "data.patches.mode=grid").data).train.layouts)
    with tarfile.open(next((tmp_path / "grid").glob("val-*.tar"))) as shard:
        first = json.loads(shard.extractfile(next(m for m in shard.getmembers() if m.name.endswith(".json"))).read())
    image, x, y = copy.val.places[0]
    assert first == {"path": copy.val.images.paths[image], "level": 1, "x": int(x), "y": int(y),
                     "stored_size": [32, 32], "label": int(copy.val.labels[0])}


def test_draws_are_distinct_an_image_and_follow_the_seed_alone(slides, tmp_path):
    _, first = prepared(slides, tmp_path / "a", "prepare.patch_draws=4")
    _, again = prepared(slides, tmp_path / "b", "prepare.patch_draws=4")
    _, other = prepared(slides, tmp_path / "c", "prepare.patch_draws=4", "seed=7")
    places = [{tuple(row) for row in copy.train.places.tolist()} for copy in (first, again, other)]
    assert places[0] == places[1] and places[0] != places[2]  # negative control: another seed, other patches
    per_image = np.bincount(first.train.places["image"])
    assert len(first.train.places) == len(places[0]) and per_image.max() == 4  # distinct, at most 4 an image
    assert first.split["patches"]["draws"] == 4 and len(first.val) == len(prepared(slides, tmp_path / "d")[1].val)


def test_a_changed_places_file_is_refused_and_draws_need_patches(slides, tmp_path):
    prepared(slides, tmp_path / "copy")
    places = tmp_path / "copy" / "patches-val.npy"
    rows = np.load(places)
    rows["x"][0] += 1
    np.save(places, rows)
    with pytest.raises(DataError, match="patches-val.npy does not match the checksum"):
        prepared_source(PreparedDataConfig(path=str(tmp_path / "copy")))
    with pytest.raises(ConfigError, match="prepare.patch_draws.*without data.patches.size"):
        prepare_config("data=folder", f"data.path={slides}", "prepare.patch_draws=3")
    with pytest.raises(ConfigError, match="prepare.patch_draws.*a table's own patches"):
        prepare_config("data=table", "data.table=t.csv", "data.columns.x=x", "data.columns.y=y",
                       "data.patches.size=[32,32]", "prepare.patch_draws=3")
