"""app/prepare in-process: the resize rule, the shard assignment, a prepare killed mid-way
resumed (a shard left as a half-written staging file, no manifest yet) into a local folder and
into a bucket of a real S3 endpoint on localhost (tests/s3_endpoint.py), the copy in the bucket
byte for byte the local one, and the refusals: a source at a URL, an https:// copy, a missing
bucket, a bucket folder that holds something else; the source's split in the manifest and each
sample's original found from its .json member, a raw copy through WebDataset."""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
import s3fs
import tifffile
from hydra import compose, initialize_config_dir
from PIL import Image
from s3_endpoint import environment, new_bucket
from shard_checks import assert_webdataset_reads_what_the_index_says

from app.config import conf_dir, load
from app.data.copies.prepared import prepared_source
from app.data.copies.shards import FORMAT_VERSION, manifest_checksum, read_index, read_manifest
from app.data.copies.storage import LocalStore, RemoteStore, Store
from app.data.pixels import tiff
from app.data.pixels.decode import Decode, Pixels
from app.data.sources.chosen import load_or_generate_source
from app.errors import ConfigError, DataError
from app.prepare import job
from app.prepare.copy import held_alone, write_prepared_copy
from app.prepare.encode import fit_short_side
from app.prepare.plan import JOURNAL, read_plan, shard_orders
from app.prepare.rule import stored_short_side
from app.prepare.tar import staging_folder
from app.schema import register
from app.schema.data import PreparedDataConfig

register()
TINY = ["data.num_images=24", "data.source_size=64", "data.num_classes=3", "data.image_size=[16,16]"]


def prepared_config(*overrides: str):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return load(compose("prepare", overrides=list(overrides)))


def test_auto_takes_the_larger_need_of_train_and_eval_and_refuses_source_pixel_transforms():
    crop = "{_target_: albumentations.RandomResizedCrop, size: [64, 64], scale: [0.5, 1.0], ratio: [1.0, 1.0]}"
    side, why = stored_short_side(prepared_config(f"augment.transforms=[{crop}]", "data.image_size=[64,64]"))
    assert side == 91 and "RandomResizedCrop" in why  # 64 / sqrt(0.5), above eval's 64
    eval_crop = prepared_config("augment.transforms=[]", "data.image_size=[64,64]",
                                "augment.eval_transform=center_crop")
    assert stored_short_side(eval_crop)[0] == round(64 / 0.875)  # eval's SmallestMaxSize, above train's Resize
    assert stored_short_side(prepared_config("prepare.short_side=300"))[0] == 300
    assert stored_short_side(prepared_config("prepare.short_side=full"))[0] is None
    refused = "augment.transforms=[{_target_: albumentations.RandomCrop, height: 32, width: 32}]"
    with pytest.raises(ConfigError, match="RandomCrop works in source pixels.*prepare.short_side=full"):
        stored_short_side(prepared_config(refused))
    with pytest.raises(ConfigError, match="GaussianBlur is not known to the resize rule"):
        stored_short_side(prepared_config("augment.transforms=[{_target_: albumentations.GaussianBlur}]"))
    assert stored_short_side(prepared_config(refused, "prepare.short_side=48"))[0] == 48  # by hand: allowed
    with pytest.raises(ConfigError, match="prepare.short_side"):
        prepared_config("prepare.short_side=big")


def test_the_resize_keeps_the_aspect_and_never_upscales():
    wide = np.zeros((300, 500, 3), np.uint8)
    assert fit_short_side(wide, 120).shape == (120, 200, 3)
    assert fit_short_side(wide.transpose(1, 0, 2), 120).shape == (200, 120, 3)
    assert fit_short_side(wide, 400).shape == (300, 500, 3)  # never up
    assert fit_short_side(wide, None).shape == (300, 500, 3)


def test_shards_are_one_seeded_shuffle_and_no_shard_is_one_class():
    labels = np.repeat(np.arange(4), 10)  # the source's order: class by class
    shards = shard_orders(40, 10, seed=0, split="train")
    assert [len(s) for s in shards] == [10, 10, 10, 10]
    assert sorted(np.concatenate(shards).tolist()) == list(range(40))  # each sample once
    assert all(len(set(labels[s])) > 1 for s in shards)
    assert all((a == b).all() for a, b in zip(shards, shard_orders(40, 10, seed=0, split="train"), strict=True))
    reseeded = np.concatenate(shard_orders(40, 10, seed=1, split="train"))
    assert not (np.concatenate(shards) == reseeded).all()  # negative control: another seed, another order
    unshuffled = np.array_split(np.arange(40), 4)  # negative control: cut in the source's order
    assert all(len(set(labels[s])) == 1 for s in unshuffled)
    assert [len(s) for s in shard_orders(23, 10, seed=0, split="val")] == [8, 8, 7]


@pytest.fixture
def s3(monkeypatch, tmp_path):
    """The local S3 endpoint in this process's environment, and shards staged under tmp_path."""
    for name, value in environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return s3fs.S3FileSystem(skip_instance_cache=True)


@pytest.fixture(params=["local", "s3"])
def out(request, tmp_path) -> str:
    """Where the copy goes: a local folder, or a folder of a new bucket on the local S3 endpoint."""
    if request.param == "local":
        return str(tmp_path / "copy")
    return f"s3://{new_bucket(request.getfixturevalue('s3'))}/copy"


@pytest.fixture
def writes(monkeypatch) -> list[str]:
    """The names every Store writes from now on (the real writes still happen)."""
    written: list[str] = []
    for kind in (LocalStore, RemoteStore):
        for method in ("write_bytes", "put_file_and_delete_it"):
            def spied(self, *args, _real=getattr(kind, method), **kw):
                written.append(args[-1] if isinstance(args[0], Path) else args[0])
                return _real(self, *args, **kw)
            monkeypatch.setattr(kind, method, spied)
    return written


def copied(out: str) -> dict[str, bytes]:
    """Every file of a copy (the .prepare records too) by its name under the copy's root."""
    if Store.at(out).local is not None:
        return {str(p.relative_to(out)): p.read_bytes() for p in sorted(Path(out).rglob("*")) if p.is_file()}
    fs = Store.at(out).fs
    root = out.removeprefix("s3://")
    return {name.removeprefix(f"{root}/"): fs.cat_file(name) for name in fs.find(root)}


def test_a_killed_prepare_keeps_its_finished_shards_and_finishes_the_rest(out, tmp_path, writes):
    config = prepared_config(*TINY, f"data.path={tmp_path / 'data'}", f"prepare.out={out}", "prepare.format=raw")
    store = Store.at(out)
    write_prepared_copy(config, workers=0, per_shard=5)
    assert [n for n in store.names() if n.startswith("train")] == [f"train-0000{n}.tar" for n in range(4)]
    index = store.read_bytes("index-train.npy")
    # killed while writing train-00001: half of it in its staging file, no record, no manifest
    staged = staging_folder(store) / ".train-00001.tar.99999.tmp"
    staged.write_bytes(store.read_bytes("train-00001.tar")[:1000])
    for name in ("train-00001.tar", ".prepare/train-00001.tar.json", "manifest.json"):
        store.delete(name)
    assert not store.exists("manifest.json") and not store.exists("train-00001.tar")  # negative control
    if store.local is not None:
        with pytest.raises(DataError, match="did not finish"):  # not a copy a reader opens
            read_manifest(out)
    writes.clear()
    line = write_prepared_copy(config, workers=0, per_shard=5)
    assert "prepared 30 files" in line
    assert [name for name in writes if name.endswith(".tar")] == ["train-00001.tar"]  # the rest kept
    assert not staged.exists() and not list(staging_folder(store).glob(".*.tmp"))  # the half-written one is gone
    assert store.read_bytes("index-train.npy") == index
    assert json.loads(store.read_bytes("manifest.json"))["splits"]["train"]["count"] == 18
    writes.clear()
    assert "up to date" in write_prepared_copy(config, workers=0, per_shard=5)
    assert writes == []  # nothing written
    # another setting into the same folder: refused, nothing overwritten
    other = prepared_config(*TINY, f"data.path={tmp_path / 'data'}", f"prepare.out={out}")
    with pytest.raises(DataError, match="format, quality differ"):
        write_prepared_copy(other, workers=0)
    assert json.loads(store.read_bytes("manifest.json"))["format"] == "raw" and writes == []


def _edited_count(raw: bytes) -> bytes:
    manifest = json.loads(raw)
    manifest["splits"]["train"]["count"] -= 1
    return json.dumps(manifest).encode()


def test_prepare_writes_again_what_is_missing_or_damaged_and_keeps_the_rest(out, tmp_path, writes):
    config = prepared_config(*TINY, f"data.path={tmp_path / 'data'}", f"prepare.out={out}", "prepare.format=raw")
    store = Store.at(out)
    write_prepared_copy(config, workers=0, per_shard=5)
    whole = copied(out)
    damages = {"index-train.npy": lambda: store.delete("index-train.npy"),
               "train-00002.tar": lambda: store.write_bytes("train-00002.tar", whole["train-00002.tar"][:700]),
               "manifest.json": lambda: store.write_bytes("manifest.json", _edited_count(whole["manifest.json"]))}
    for name, damage in damages.items():
        damage()
        assert copied(out) != whole  # negative control: the comparison sees the damage
        writes.clear()
        assert "up to date" not in write_prepared_copy(config, workers=0, per_shard=5), name
        assert copied(out) == whole, name  # as first written
        assert [n for n in writes if n.endswith(".tar")] == ([name] if name.endswith(".tar") else []), name
        assert {"manifest.json", "index-train.npy"} <= set(writes), name
    writes.clear()
    assert "up to date" in write_prepared_copy(config, workers=0, per_shard=5) and writes == []


def test_a_copy_in_a_bucket_is_byte_for_byte_the_local_one(s3, tmp_path):
    bucket = new_bucket(s3)
    for out in (str(tmp_path / "copy"), f"s3://{bucket}/copy"):
        config = prepared_config(*TINY, f"data.path={tmp_path / 'data'}", f"prepare.out={out}")
        assert "prepared 30 files" in write_prepared_copy(config, workers=0, per_shard=7)
    local, remote = copied(str(tmp_path / "copy")), copied(f"s3://{bucket}/copy")
    made = {"manifest.json", "index-train.npy", "bad_samples.txt", ".prepare/plan.json", "train-00002.tar"}
    assert made <= set(local)
    assert local == remote
    assert not list((tmp_path / "tmp").rglob("*.tmp"))  # no staging file left behind
    s3.pipe_file(f"{bucket}/copy/index-val.npy", b"changed")  # negative control: the comparison sees a byte
    assert copied(f"s3://{bucket}/copy") != local


def test_a_url_source_or_https_copy_is_refused_and_a_bucket_holding_else_is_not_overwritten(s3, tmp_path,
                                                                                            monkeypatch):
    with pytest.raises(ConfigError, match=r"'s3://b/images' is not allowed: a local folder: data=synthetic \(and prep"):
        write_prepared_copy(prepared_config(*TINY, "data.path=s3://b/images", f"prepare.out={tmp_path}/c"), workers=0)
    with pytest.raises(ConfigError, match="https:// URL, which can only be read"):
        write_prepared_copy(prepared_config(*TINY, f"data.path={tmp_path / 'data'}",
                                            "prepare.out=https://host/copy"), workers=0)
    encoded = []
    monkeypatch.setattr(job, "encode_or_bad", lambda *args: encoded.append(args))  # no encoding before the checks
    bucket = new_bucket(s3)
    s3.pipe_file(f"{bucket}/else/notes.txt", b"mine")
    s3.pipe_file(f"{bucket}/object", b"a file")
    for out, refused in ((f"s3://no-such-{bucket}/copy", rf"s3://no-such-{bucket}/copy does not exist"),
                         (f"s3://{bucket}/else", "holds other files, not a prepared copy"),
                         (f"s3://{bucket}/object", "is a file, not a folder")):
        with pytest.raises(DataError, match=refused):
            write_prepared_copy(prepared_config(*TINY, f"data.path={tmp_path / 'data'}", f"prepare.out={out}"),
                                workers=0)
    assert encoded == [] and s3.cat_file(f"{bucket}/else/notes.txt") == b"mine"
    assert s3.ls(f"{bucket}/else", detail=False) == [f"{bucket}/else/notes.txt"]


def _metas(out, split: str) -> list[dict]:
    """The .json members of a split's shards, in key order."""
    metas = []
    for name in read_manifest(out).splits[split].shards:
        with tarfile.open(out / name) as tar:
            metas += [json.loads(tar.extractfile(m).read()) for m in tar.getmembers() if m.name.endswith(".json")]
    return metas


def test_the_manifest_records_the_sources_split_and_each_sample_names_its_original(tmp_path):
    out = tmp_path / "copy"
    (out / JOURNAL).mkdir(parents=True)  # a prepare killed while it wrote its plan left this alone
    (out / JOURNAL / ".plan.json.4242.tmp").write_text('{"key": {"short_')
    config = prepared_config(*TINY, f"data.path={tmp_path / 'data'}", f"prepare.out={out}", "prepare.format=raw")
    write_prepared_copy(config, workers=0, per_shard=5)
    assert not list(out.rglob("*.tmp"))
    source, manifest = load_or_generate_source(config.data), read_manifest(out)
    assert manifest.assignment == json.loads(json.dumps(source.split))  # as training's split.json holds it
    assert manifest.assignment["train"] and manifest.assignment["val"] and manifest.assignment["test"]
    for split in manifest.splits:
        original, assigned = getattr(source, split), manifest.assignment[split]
        places = [assigned.index(os.path.relpath(meta["path"], manifest.assignment["root"]) if split != "test"
                                 else meta["path"]) for meta in _metas(out, split)]
        assert sorted(places) == list(range(len(original)))  # each original once, found by its path alone
        assert [original.describe(p) for p in places] == [meta["path"] for meta in _metas(out, split)]
        assert (original.labels[places] == read_index(out, split)["label"]).all()
        assert places != sorted(places)  # negative control: shuffled, so a key's number is not the place
    assert assert_webdataset_reads_what_the_index_says(out) == 30
    written = json.loads((out / "manifest.json").read_text())
    # format 2 (one label a sample, before the task was recorded) reads as it did, checksums checked
    two = {**{k: v for k, v in written.items() if k != "task"}, "version": 2,
           "splits": {name: {k: v for k, v in record.items() if k != "labels_sha256"}
                      for name, record in written["splits"].items()}}
    (out / "manifest.json").write_text(json.dumps({**two, "checksum": manifest_checksum(two)}))
    assert len(prepared_source(PreparedDataConfig(path=str(out))).train) == 18
    (out / "manifest.json").write_text(json.dumps({**two, "checksum": written["checksum"]}))
    with pytest.raises(DataError, match="does not match its checksum"):  # negative control: still checked
        read_manifest(out)
    # a manifest written before the assignment was recorded (format 1, before checksums) still reads (with none)
    old = {k: v for k, v in written.items() if k not in ("assignment", "checksum")}
    (out / "manifest.json").write_text(json.dumps({**old, "version": 1}))
    assert read_manifest(out).assignment == {} and read_manifest(out).splits["train"].count == 18
    (out / "manifest.json").write_text(json.dumps({**written, "surprise": 1}))
    with pytest.raises(DataError, match="cannot be read"):  # negative control: an unknown field is still refused
        read_manifest(out)


def test_a_folder_with_anything_but_an_unfinished_plan_is_refused(tmp_path):
    (tmp_path / ".prepare").mkdir()
    (tmp_path / ".prepare" / ".plan.json.4242.tmp").write_text("{")
    assert read_plan(Store.at(str(tmp_path)), {"any": "key"}) is None  # killed while the plan was written: as new
    (tmp_path / ".prepare" / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="holds other files"):
        read_plan(Store.at(str(tmp_path)), {"any": "key"})


def test_the_manifest_keeps_the_overrides_that_prepare_it_again_and_no_secret(tmp_path):
    """The advice to prepare a damaged copy again is a whole command: the source's own keys
    (data.num_images, ...) included, from any folder; Hydra's keys and credentials left out."""
    from app.data.copies.shards import prepare_command

    out = tmp_path / "copy with space"
    given = [*TINY, f"data.path={tmp_path / 'data'}", f"prepare.out={out}", "hydra.run.dir=x",
             "prepare.storage_options.secret=SECRET"]
    config = prepared_config(*TINY, f"data.path={tmp_path / 'data'}", f"prepare.out={out}")
    write_prepared_copy(config, workers=0, per_shard=5, overrides=given)
    manifest = read_manifest(out)
    assert manifest.overrides == TINY and manifest.source["path"] == str(tmp_path / "data")
    command = prepare_command(manifest, str(out))
    assert command == (f"python -m app prepare data=synthetic data.path={tmp_path / 'data'} {' '.join(TINY[:3])} "
                       f"'data.image_size=[16,16]' prepare.out='{out}' prepare.short_side={manifest.short_side} "
                       "prepare.format=jpeg prepare.quality=95")
    assert "SECRET" not in command and "hydra" not in command  # negative controls: given, left out
    assert b"SECRET" not in (out / "manifest.json").read_bytes()


def test_a_multilabel_copy_stores_each_samples_label_vector_and_refuses_a_run_of_the_other_task(tmp_path):
    (tmp_path / "img").mkdir()
    tags = ["road water", "", "water", "road", "field road water"]
    rows = ["name,tags"]
    for i in range(30):
        Image.fromarray(np.full((12, 12, 3), i * 8, np.uint8)).save(tmp_path / "img" / f"{i}.png")
        rows.append(f"img/{i}.png,{tags[i % 5]}")
    (tmp_path / "tiles.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "copy"
    table = ["data=table", f"data.table={tmp_path / 'tiles.csv'}", "data.columns.path=name", "data.columns.label=tags",
             "data.task=multilabel", "data.label_separator=' '", "data.image_size=[8,8]"]
    config = prepared_config(*table, f"prepare.out={out}", "prepare.format=raw")
    write_prepared_copy(config, workers=0, per_shard=7)
    source, manifest = load_or_generate_source(config.data), read_manifest(out)
    assert (manifest.version, manifest.task, manifest.class_names) == (FORMAT_VERSION, "multilabel",
                                                                       ["field", "road", "water"])
    copy = prepared_source(PreparedDataConfig(path=str(out), task="multilabel"))
    for split in ("train", "val"):
        original, prepared = getattr(source, split), getattr(copy, split)
        places = [manifest.assignment[split].index(os.path.relpath(meta["path"], manifest.assignment["root"]))
                  for meta in _metas(out, split)]
        assert prepared.labels.dtype == np.uint8 and (prepared.labels == original.labels[places]).all()
        assert (read_index(out, split)["label"] == -1).all()
        assert (prepared.take(np.array([1, 0])).labels == prepared.labels[[1, 0]]).all()
    with tarfile.open(out / manifest.splits["train"].shards[0]) as tar:
        classes = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.name.endswith(".cls")}
    assert set(classes.values()) <= {"1 2", "", "2", "1", "0 1 2"} and len(set(classes.values())) > 1
    with pytest.raises(DataError, match="holds several labels an image.*add data.task=multilabel"):
        prepared_source(PreparedDataConfig(path=str(out)))  # negative control: a one-label run of it
    labels = np.load(out / "labels-val.npy")
    labels[0] = 1 - labels[0]
    np.save(out / "labels-val.npy", labels)
    with pytest.raises(DataError, match="labels-val.npy does not match the checksum"):
        prepared_source(PreparedDataConfig(path=str(out), task="multilabel"))


def test_a_copy_older_than_its_source_is_named_stale_with_the_files_and_the_command_that_refreshes_it(tmp_path,
                                                                                                      caplog):
    out = tmp_path / "copy"
    config = prepared_config(*TINY, f"data.path={tmp_path / 'data'}", f"prepare.out={out}")
    write_prepared_copy(config, workers=0, per_shard=5)
    caplog.clear()
    prepared_source(PreparedDataConfig(path=str(out)))
    assert "older than its source" not in caplog.text  # negative control: the source as it was prepared
    replaced = Path(load_or_generate_source(config.data).train.paths[3])
    Image.new("RGB", (80, 64), (9, 9, 9)).save(replaced, format=Image.open(replaced).format)
    prepared_source(PreparedDataConfig(path=str(out)))
    assert f"{out} is older than its source: 1 of its source files changed" in caplog.text
    assert str(replaced) in caplog.text and f"prepare.out={out}-fresh" in caplog.text


def test_a_second_prepare_into_a_folder_being_written_is_refused_by_name(tmp_path):
    out = tmp_path / "copy"
    config = prepared_config(*TINY, f"data.path={tmp_path / 'data'}", f"prepare.out={out}")
    with held_alone(Store.at(str(out))):  # the first prepare's lock: its own open of the folder, as another process's
        with pytest.raises(DataError, match=f"prepare.out={out} is being written by another prepare now"):
            write_prepared_copy(config, workers=0, per_shard=5)
    assert not (out / "manifest.json").exists()  # nothing written by the refused one
    write_prepared_copy(config, workers=0, per_shard=5)  # negative control: once the first ended, it runs
    assert read_manifest(out).splits["train"].count == 18


def test_a_copy_inside_its_own_source_folder_is_refused_before_any_folder_is_made(tmp_path):
    source = tmp_path / "data"
    for out in (source / "copy", source):
        config = prepared_config(*TINY, f"data.path={source}", f"prepare.out={out}")
        with pytest.raises(ConfigError, match=rf"`prepare.out` = '{out}' is inside data.path={source}"):
            write_prepared_copy(config, workers=0, per_shard=5)
    assert not (source / "copy").exists()
    beside = tmp_path / "data_copy"  # negative control: a folder whose name only begins with the source's
    write_prepared_copy(prepared_config(*TINY, f"data.path={source}", f"prepare.out={beside}"), workers=0, per_shard=5)
    assert read_manifest(beside).splits["train"].count == 18


def test_a_copy_holding_no_training_sample_of_a_class_is_refused_as_a_table_is(tmp_path):
    source = tmp_path / "data"
    for cls in ("cats", "dogs", "owls"):
        (source / cls).mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (20, 20), (60 * i, 9, 9)).save(source / cls / f"{i}.jpg")
    for junk in (source / "dogs").iterdir():
        junk.write_bytes(b"not a jpeg")
    settings = ["data=folder", "data.image_size=[16,16]", "data.on_bad_sample=skip", "data.max_bad_fraction=0.5"]
    write_prepared_copy(prepared_config(*settings, f"data.path={source}", f"prepare.out={tmp_path / 'copy'}"),
                        workers=0, per_shard=5)
    with pytest.raises(DataError, match=rf"data=prepared data.path={tmp_path / 'copy'}: class\(es\) dogs have no "
                                        "sample in the training split"):
        load_or_generate_source(PreparedDataConfig(path=str(tmp_path / "copy")))
    Image.new("RGB", (20, 20)).save(source / "dogs" / "4.jpg")  # negative control: a dog left in every split
    Image.new("RGB", (20, 20)).save(source / "dogs" / "5.jpg")
    write_prepared_copy(prepared_config(*settings, f"data.path={source}", f"prepare.out={tmp_path / 'again'}"),
                        workers=0, per_shard=5)
    assert load_or_generate_source(PreparedDataConfig(path=str(tmp_path / "again"))).class_names == ["cats", "dogs",
                                                                                                      "owls"]


def test_a_raw_copy_keeps_each_originals_no_data_value_and_never_blends_it(tmp_path):
    """GeoTIFFs with a no-data border of 0, one without the tag: the copy keeps each sample's own value (stats reads it
    as the source's), and resizes a sample with one nearest, so no 0 is blended into a valid value."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(("a", "b")):
        (tmp_path / "geo" / name).mkdir(parents=True)
        for i in range(5):
            image = rng.integers(10_000, 20_000, (24, 24, 2), dtype=np.uint16)
            image[:7] = 0  # to row 7: an area resize to 16 blends its edge
            tags = [] if (c, i) == (0, 0) else [(42113, "s", 0, "0", True)]
            tifffile.imwrite(tmp_path / "geo" / name / f"{i}.tif", image, photometric="minisblack",
                             planarconfig="contig", extratags=tags)
    out = tmp_path / "copy"
    config = prepared_config("data=folder", f"data.path={tmp_path / 'geo'}", "data.channels=all", "data.dtype=uint16",
                             "data.image_size=[16,16]", "augment=none", "data.val_fraction=0.4", f"prepare.out={out}",
                             "prepare.format=raw")
    write_prepared_copy(config, workers=0, per_shard=4)
    copy, decode = prepared_source(PreparedDataConfig(path=str(out))), Decode(pixels=Pixels(channels="all", bands=2,
                                                                                           dtype="uint16"))
    seen = []
    for split in ("train", "val"):
        prepared = copy.splits()[split]
        kept = [prepared.nodata(i) for i in range(len(prepared))]
        assert kept == [tiff.nodata_of(meta["path"]) for meta in _metas(out, split)]  # each its original's
        for i, value in enumerate(kept):
            image = prepared.read(i, decode)
            assert image.shape == (16, 16, 2)
            blended = ((image > 0) & (image < 10_000)).any()
            assert not blended if value is not None else blended  # negative control: no tag, an area resize
            seen.append(value)
    assert set(seen) == {None, 0.0}


def test_a_copy_is_named_stale_when_its_table_changes_or_files_are_added_to_its_folder(tmp_path, caplog):
    for c, name in enumerate(("cat", "dog")):
        (tmp_path / "img" / name).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(np.full((12, 12, 3), 40 * c + i, np.uint8)).save(tmp_path / "img" / name / f"{i}.png")
    table = tmp_path / "t.csv"
    table.write_text("path,label\n" + "".join(f"img/{n}/{i}.png,{n}\n" for n in ("cat", "dog") for i in range(6)))
    sources = {"table": ["data=table", f"data.table={table}"],
               "folder": ["data=folder", f"data.path={tmp_path / 'img'}"]}
    for name, data in sources.items():
        config = prepared_config(*data, "data.image_size=[8,8]", f"prepare.out={tmp_path / name}")
        write_prepared_copy(config, workers=0, per_shard=5)
    caplog.clear()
    for name in sources:
        prepared_source(PreparedDataConfig(path=str(tmp_path / name)))
    assert "older than its source" not in caplog.text  # negative control: the sources as they were prepared
    table.write_text(table.read_text().replace("img/cat/1.png,cat", "img/cat/1.png,dog"))
    os.utime(table, ns=(0, 10**18))  # a relabelling within the filesystem's time resolution
    prepared_source(PreparedDataConfig(path=str(tmp_path / "table")))
    assert f"{tmp_path / 'table'} is older than its source" in caplog.text
    assert f"{table} (modified since)" in caplog.text
    caplog.clear()
    Image.new("RGB", (12, 12)).save(tmp_path / "img" / "dog" / "new.png")
    (tmp_path / "img" / "wolf").mkdir()
    os.utime(tmp_path / "img" / "dog", ns=(0, 10**18))
    prepared_source(PreparedDataConfig(path=str(tmp_path / "folder")))
    assert f"{tmp_path / 'img' / 'dog'}/ (files added, removed or renamed since)" in caplog.text
    assert f"{tmp_path / 'img'}/ (files added" in caplog.text and "img/cat/" not in caplog.text


def test_a_hidden_file_in_a_folder_sources_class_folder_leaves_its_copy_fresh(tmp_path, caplog):
    """A .DS_Store touched in a class folder changes the folder's mtime, not what the source lists: no stale warning;
    an image added there (the control) is named."""
    for c, name in enumerate(("cat", "dog")):
        (tmp_path / "img" / name).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(np.full((12, 12, 3), 40 * c + i, np.uint8)).save(tmp_path / "img" / name / f"{i}.png")
    config = prepared_config("data=folder", f"data.path={tmp_path / 'img'}", "data.image_size=[8,8]",
                             f"prepare.out={tmp_path / 'copy'}")
    write_prepared_copy(config, workers=0, per_shard=5)
    (tmp_path / "img" / "cat" / ".DS_Store").write_bytes(b"\0")
    (tmp_path / "img" / "cat" / "notes.txt").write_text("scanned on Monday")
    os.utime(tmp_path / "img" / "cat", ns=(0, 10**18))
    caplog.clear()
    prepared_source(PreparedDataConfig(path=str(tmp_path / "copy")))
    assert "older than its source" not in caplog.text
    Image.new("RGB", (12, 12)).save(tmp_path / "img" / "cat" / "new.png")
    prepared_source(PreparedDataConfig(path=str(tmp_path / "copy")))
    assert f"{tmp_path / 'img' / 'cat'}/ (files added, removed or renamed since)" in caplog.text
