"""data=prepared (app/data/copies/prepared.py): sample i read from its shard by its index row, the
bad-sample naming, the short-side refusal, the plan's sizes from the index, the source's checks."""

from __future__ import annotations

import json
import logging
import pickle
import re
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf
from prepared_copies import corrupt_member, flip_byte, picture, write_as_format_1, write_copy

from app.data.copies.shards import read_index
from app.data.pixels.images import Decode, rgb_from_bytes
from app.data.sources.chosen import load_or_generate_source
from app.errors import BadSampleError, ConfigError, DataError
from app.runs.rundata import check_same_data, check_stored_sizes
from app.runs.saved import resumed_config
from app.schema.data import DATA_TARGETS


def _data(path, **keys):
    return SimpleNamespace(_target_=DATA_TARGETS["prepared"], task="multiclass",
                           path=None if path is None else str(path), **keys)


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    root = tmp_path_factory.mktemp("prepared")
    return {fmt: write_copy(root / fmt, image_format=fmt) for fmt in ("jpeg", "raw")}


def test_raw_sample_is_the_stored_pixels_read_by_its_range_alone(copies):
    source = load_or_generate_source(_data(copies["raw"]))
    train = pickle.loads(pickle.dumps(source.train))  # as a spawn'ed worker gets it
    assert train._index is None and not train.root._shards.fds  # its own descriptors, none open yet
    for i in (0, 5, 23):
        raw = train.fetch(i)
        assert len(raw) == 40 * 56 * 3  # the member's pixels, not the shard (which holds 12 samples)
        assert np.array_equal(train.decode(i, raw), picture(i % 3, i))
    assert not np.array_equal(train.read(1), picture(1, 2))  # negative control: another sample differs
    assert list(train.labels[:4]) == [0, 1, 2, 0] and source.class_names == ["class0", "class1", "class2"]


def test_jpeg_sample_decodes_to_the_original(copies):
    source = load_or_generate_source(_data(copies["jpeg"]))
    image = source.val.read(4)
    assert image.shape == (40, 56, 3) and image.flags.writeable
    assert np.abs(image.astype(int) - picture(4 % 3, 104)).mean() < 6  # noise at quality 95
    assert np.abs(image.astype(int) - picture(4 % 3, 105)).mean() > 20  # negative control
    assert len(source.test) == 6 and len(source.train) == 24


def test_a_corrupt_member_is_a_bad_sample_named_by_shard_and_key(tmp_path):
    root = write_copy(tmp_path / "copy", counts={"train": 6, "val": 3})
    assert corrupt_member(root, "train", 3) == f"{root}/train-00001.tar member train-000000003.jpg"
    train = load_or_generate_source(_data(root)).train
    with pytest.raises(BadSampleError, match=r"train-00001\.tar member train-000000003\.jpg"):
        train.read(3)
    train.read(1)  # negative control: the same shard's other sample reads


def test_a_flipped_byte_in_a_members_data_fails_its_crc_named_by_shard_and_member(tmp_path, caplog):
    root = write_copy(tmp_path / "copy", counts={"train": 6, "val": 3})
    where = flip_byte(root, "train", 3)
    train = load_or_generate_source(_data(root)).train
    advice = rf"delete it, then run the copy's prepare again, `python -m app prepare data=folder data.path=/orig " \
             rf"prepare.out={root} "
    with pytest.raises(BadSampleError, match=rf"{re.escape(where)}\) could not be loaded: its bytes fail their "
                                             rf"CRC32 check .*{advice}"):
        train.read(3)
    train.read(1)  # negative control: the same shard's other sample reads
    write_as_format_1(root)  # as an app before checksums wrote it: still read, said to be unchecked
    with caplog.at_level(logging.WARNING, logger="app.data.copies.prepared"):
        old = load_or_generate_source(_data(root))
    unchecked = [r.getMessage() for r in caplog.records if "unchecked" in r.getMessage()]
    assert len(unchecked) == 1 and f"{root}/manifest.json is format version 1" in unchecked[0]
    assert old.train.read(3).shape == (40, 56, 3)  # the same flip, decoded unnoticed


def test_an_edited_manifest_or_index_is_refused_naming_the_file_and_the_prepare_that_mends_it(tmp_path):
    root = write_copy(tmp_path / "copy", counts={"train": 6, "val": 3})
    written = json.loads((root / "manifest.json").read_text())
    # negative control: as written
    assert load_or_generate_source(_data(root)).class_names == ["class0", "class1", "class2"]
    counted = {**written["splits"], "train": {**written["splits"]["train"], "count": 5}}
    for edit in ({"class_names": ["class1", "class0", "class2"]}, {"splits": counted}, {"version": 1}):
        (root / "manifest.json").write_text(json.dumps({**written, **edit}))
        with pytest.raises(DataError, match=rf"{root}/manifest\.json does not match its checksum.* labels cannot be "
                                            rf"trusted; run the copy's prepare again, `python -m app prepare "
                                            rf"data=folder data.path=/orig prepare.out={root} "):
            load_or_generate_source(_data(root))
    (root / "manifest.json").write_text(json.dumps(written))
    index = np.load(root / "index-train.npy")
    index["label"][0] = 1
    np.save(root / "index-train.npy", index)
    with pytest.raises(DataError, match=rf"{root}/index-train\.npy does not match the checksum {root}/manifest\.json "
                                        "records for it .*the copy is damaged; run the copy's prepare again"):
        load_or_generate_source(_data(root))


def test_a_shard_cut_short_is_refused_at_start_and_a_bad_sample_once_running(tmp_path):
    root = write_copy(tmp_path / "copy", image_format="raw", counts={"train": 6, "val": 3})
    row = read_index(root, "train")[4]
    train = load_or_generate_source(_data(root)).train  # opened while whole: the start's checks pass
    with open(root / "train-00000.tar", "r+b") as shard:
        shard.truncate(int(row["offset"]) + 10)
    with pytest.raises(BadSampleError, match=r"train-00000\.tar member train-000000004\.npy.*truncated"):
        train.read(4)
    train.read(2)  # negative control: before the cut
    with pytest.raises(DataError, match=rf"{root}/train-00000\.tar is \d+ bytes where {root}/manifest\.json "
                                        rf"records \d+ .*`python -m app prepare .*prepare\.out={root} "):
        load_or_generate_source(_data(root))


def _config(image_size, transforms=()):
    augment = SimpleNamespace(transforms=list(transforms), eval_transform="resize", eval_crop_fraction=0.875)
    return SimpleNamespace(data=SimpleNamespace(image_size=image_size), augment=augment)


def test_a_copy_stored_smaller_than_the_transforms_need_is_refused(copies, tmp_path):
    source = load_or_generate_source(_data(copies["jpeg"]))  # short side 40
    crop = [{"_target_": "albumentations.RandomResizedCrop", "size": [32, 32], "scale": [0.5, 1.0]}]
    with pytest.raises(DataError, match=r"short side of 40 px, but the train transforms .* need 53 px.*"
                                        r"python -m app prepare data=folder data.path=/orig .*short_side=53"):
        check_stored_sizes(_config([32, 32], crop), source)
    in_source_pixels = [{"_target_": "albumentations.CenterCrop", "height": 30, "width": 30}]  # the rule cannot tell
    with pytest.raises(DataError, match="the evaluation transforms .* need 48 px"):
        check_stored_sizes(_config([48, 48], in_source_pixels), source)
    check_stored_sizes(_config([40, 40]), source)  # negative control: big enough
    full = load_or_generate_source(_data(write_copy(tmp_path / "full", counts={"train": 3, "val": 3}, short_side=None)))
    check_stored_sizes(_config([48, 48], crop), full)  # stored at full size: never refused


def test_the_plan_takes_the_sizes_from_the_index_without_opening_a_shard(copies, tmp_path):
    root = write_copy(tmp_path / "copy", counts={"train": 6, "val": 3})
    train = load_or_generate_source(_data(root)).train
    for shard in root.glob("*.tar"):
        shard.unlink()  # the plan must not need them
    assert train.largest_decode_bytes(Decode()) == (40 * 56 * 3, 0)
    # a draft decode to a short side of 10 reduces 40×56 by 4
    assert train.largest_decode_bytes(Decode(min_short_side=10)) == (10 * 14 * 3, 0)
    jpeg = load_or_generate_source(_data(copies["jpeg"])).train
    assert rgb_from_bytes(bytes(jpeg.fetch(0)), 10).shape == (10, 14, 3)  # what the decode makes, indeed
    raw = load_or_generate_source(_data(copies["raw"])).train
    assert raw.largest_decode_bytes(Decode(min_short_side=10)) == (40 * 56 * 3, 0)  # raw is never reduced


def test_the_fingerprint_is_the_manifests(copies, tmp_path):
    jpeg, raw = (load_or_generate_source(_data(copies[f])) for f in ("jpeg", "raw"))
    assert jpeg.fingerprint != raw.fingerprint and jpeg.split["source"] == "prepared"
    again = load_or_generate_source(_data(write_copy(tmp_path / "again", counts={"train": 3, "val": 3})))
    assert again.fingerprint == jpeg.fingerprint  # the same source, rule and format
    assert jpeg.split["prepared"]["short_side"] == 40 and jpeg.split["counts"]["test"] == 6


def test_a_folder_that_is_not_there_is_refused():
    with pytest.raises(DataError, match="/no/such/copy does not exist or is not a folder"):
        load_or_generate_source(_data("/no/such/copy"))


def test_a_folder_without_a_manifest_is_refused(copies, tmp_path):
    with pytest.raises(DataError, match="manifest.json is missing"):
        load_or_generate_source(_data(tmp_path))
    load_or_generate_source(_data(copies["raw"]))  # negative control


def test_data_path_is_required():
    with pytest.raises(ConfigError, match="data=prepared needs a folder.*prepare.out"):
        load_or_generate_source(_data(None))


def test_resumes_data_check_takes_the_manifests_fingerprint(copies, tmp_path):
    jpeg = load_or_generate_source(_data(copies["jpeg"]))
    (tmp_path / "split.json").write_text(json.dumps(jpeg.split))
    check_same_data(tmp_path, load_or_generate_source(_data(copies["jpeg"])))  # the same copy: resumes
    with pytest.raises(DataError, match="the data changed since"):  # negative control: another format
        check_same_data(tmp_path, load_or_generate_source(_data(copies["raw"])))


def test_a_run_resumes_on_its_copy_moved_to_another_folder_known_by_its_manifest(copies, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(copies["jpeg"], moved)
    (tmp_path / "split.json").write_text(json.dumps(load_or_generate_source(_data(copies["jpeg"])).split))
    overrides = ["resume=run", f"data.path={moved}"]
    given = OmegaConf.create({"resume": "run", "data": {"path": str(moved)}})
    saved = {"data": {"_target_": DATA_TARGETS["prepared"], "path": str(copies["jpeg"])}}
    assert resumed_config(saved, given, overrides).data.path == str(moved)
    check_same_data(tmp_path, load_or_generate_source(_data(moved)))  # the same copy, elsewhere: resumes
    with pytest.raises(ConfigError, match="data.path` cannot change"):  # negative control: a folder's path is its data
        resumed_config({"data": {"_target_": DATA_TARGETS["folder"], "path": "/a"}}, given, overrides)
