"""data=prepared at a URL (app/data/copies/remote_copy.py's RemoteCopy, app/data/copies/shard_cache.py): the same
samples as the local copy through s3:// (moto's server on localhost) and http:// (a segmentation copy's masks too,
each pair one ranged read, CRC-checked), whole shards
cached on local disk (downloaded once, least recently used evicted, racing processes, a full
disk named at once), storage retries counted in the loader's telemetry, and the refusals."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import threading
from http.server import SimpleHTTPRequestHandler
from types import SimpleNamespace

import http_files
import numpy as np
import pytest
import s3fs
from http_files import Served
from hydra import compose, initialize_config_dir
from prepared_copies import write_copy
from s3_endpoint import environment, new_bucket
from segmentation_data import IGNORE, TEXTURE_CLASSES, write_texture_folder

from app.augment import Augmenter
from app.config import conf_dir, load
from app.data.copies import storage
from app.data.copies.retries import thread_retries
from app.data.copies.shard_cache import delete_least_recently_used
from app.data.copies.storage import Store
from app.data.sources.chosen import load_or_generate_source
from app.errors import BadSampleError, DataError
from app.loader import messages
from app.loader.bad_samples import failure
from app.loader.enqueuer import Enqueuer
from app.loader.settings import Queue, Settings
from app.loader.worker import fill
from app.prepare.copy import write_prepared_copy
from app.schema import register
from app.schema.data import DATA_TARGETS

register()


def _data(path, **keys):
    keys = {"storage_options": {}, "cache_dir": None, "cache_max_gb": 20.0, "task": "multiclass", **keys}
    return SimpleNamespace(_target_=DATA_TARGETS["prepared"], path=str(path), **keys)


@pytest.fixture(scope="module")
def s3():
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment().items():
            patch.setenv(name, value)
        yield s3fs.S3FileSystem(skip_instance_cache=True)


@pytest.fixture(scope="module")
def copies(s3, tmp_path_factory):
    """The jpeg and raw copies, local and uploaded (objects readable anonymously, for http://)."""
    root, bucket = tmp_path_factory.mktemp("copies"), new_bucket(s3)
    for fmt in ("jpeg", "raw"):
        write_copy(root / fmt, image_format=fmt)
        s3.put(str(root / fmt), f"{bucket}/{fmt}", recursive=True)
        for key in s3.ls(f"{bucket}/{fmt}"):
            s3.chmod(key, acl="public-read")
    return root, bucket


def _samples(source) -> list[np.ndarray]:
    return [split.read(i) for split in (source.train, source.val, source.test) for i in range(len(split))]


@pytest.mark.parametrize("fmt", ["jpeg", "raw"])
def test_a_copy_at_a_url_reads_the_same_samples_as_the_local_one(copies, fmt):
    root, bucket = copies
    local = load_or_generate_source(_data(root / fmt))
    expected = _samples(local)
    for url in (f"s3://{bucket}/{fmt}", f"{environment()['AWS_ENDPOINT_URL']}/{bucket}/{fmt}"):
        remote = load_or_generate_source(_data(url))
        assert remote.fingerprint == local.fingerprint and remote.split["root"] == url
        worker = pickle.loads(pickle.dumps(remote.train))  # as a spawn'ed worker gets it: no filesystem
        assert worker.root.store._fs is None
        assert len(worker.fetch(5)) == len(local.train.fetch(5))  # the member's range, not its shard
        got = [worker.read(i) for i in range(len(worker))] + _samples(remote)[len(worker):]
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True)), url
        assert not np.array_equal(got[0], expected[1])  # negative control: samples differ
        member = 'npy' if fmt == 'raw' else 'jpg'
        assert remote.train.describe(3) == f"{url}/train-00001.tar member train-000000003.{member}"


def test_a_segmentation_copy_at_a_url_reads_each_pair_in_one_ranged_read_its_mask_crc_checked(s3, tmp_path,
                                                                                               monkeypatch):
    made = write_texture_folder(tmp_path / "textures", train=6, val=2, size=32)
    overrides = ["data=folder", f"data.path={made.root / 'images'}", f"data.masks={made.root / 'masks'}",
                 "data.task=segmentation", f"data.classes=[{','.join(TEXTURE_CLASSES)}]", f"data.ignore_index={IGNORE}",
                 "data.image_size=[24,24]", "prepare.short_side=24", f"prepare.out={tmp_path / 'seg'}"]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        write_prepared_copy(load(compose("prepare", overrides=overrides)), workers=0, per_shard=4)
    bucket = new_bucket(s3)
    s3.put(str(tmp_path / "seg"), f"{bucket}/seg", recursive=True)
    for key in s3.find(f"{bucket}/seg"):
        s3.chmod(key, acl="public-read")
    keys = {"task": "segmentation", "classes": list(TEXTURE_CLASSES), "ignore_index": IGNORE}
    local = load_or_generate_source(_data(tmp_path / "seg", **keys)).train
    reads = []
    monkeypatch.setattr(storage.RemoteStore, "read_range", lambda self, *a, _real=storage.RemoteStore.read_range:
                        reads.append(a) or _real(self, *a))
    for url in (f"s3://{bucket}/seg", f"{environment()['AWS_ENDPOINT_URL']}/{bucket}/seg"):
        train = pickle.loads(pickle.dumps(load_or_generate_source(_data(url, **keys)).train))  # as a worker gets it
        reads.clear()
        for i in range(len(train)):
            (image, mask), (own_image, own_mask) = train.read(i), local.read(i)
            assert np.array_equal(image, own_image) and np.array_equal(mask, own_mask), (url, i)
        assert len(reads) == len(train)  # the image and its mask: one ranged GET a sample
        assert not np.array_equal(train.read(0)[1], local.read(1)[1])  # negative control: masks differ
    cached = load_or_generate_source(_data(f"s3://{bucket}/seg", cache_dir=tmp_path / "cache", **keys)).train
    assert all(np.array_equal(cached.read(i)[1], local.read(i)[1]) for i in range(len(cached)))  # from whole shards
    row = np.load(tmp_path / "seg" / "masks-train.npy")[2]
    shard = load_or_generate_source(_data(tmp_path / "seg", **keys)).train.shard_path(
        int(np.load(tmp_path / "seg" / "index-train.npy")[2]["shard"])).rsplit("/", 1)[-1]
    data = bytearray(s3.cat_file(f"{bucket}/seg/{shard}"))
    data[int(row["offset"]) + int(row["length"]) // 2] ^= 0xFF
    s3.pipe_file(f"{bucket}/seg/{shard}", bytes(data))
    train = load_or_generate_source(_data(f"s3://{bucket}/seg", **keys)).train
    with pytest.raises(BadSampleError, match=rf"s3://{bucket}/seg/{shard} member train-000000002\.seg\.png\) could "
                                             "not be loaded: its bytes fail their CRC32 check"):
        train.read(2)
    train.read(1)  # negative control: another sample reads


def test_cached_shards_are_downloaded_once_then_read_from_disk(copies, s3, tmp_path):
    root, bucket = copies
    s3.copy(f"{bucket}/raw", f"{bucket}/once", recursive=True)
    cache = tmp_path / "cache"
    source = load_or_generate_source(_data(f"s3://{bucket}/once", cache_dir=cache))
    expected = _samples(load_or_generate_source(_data(root / "raw")))[:24]
    first = pickle.loads(pickle.dumps(source.train))
    assert all(np.array_equal(first.read(i), expected[i]) for i in range(24))
    (folder,) = cache.iterdir()
    shards = {p.name: p.stat().st_ino for p in folder.glob("*.tar")}
    assert shards.keys() == {"train-00000.tar", "train-00001.tar"} and (folder / "index-train.npy").is_file()
    assert (folder / "train-00000.tar").read_bytes() == (root / "raw" / "train-00000.tar").read_bytes()
    s3.rm(f"{bucket}/once", recursive=True)  # from here, a GET would fail
    again = pickle.loads(pickle.dumps(source.train))  # another worker: its own descriptors, the same disk
    assert all(np.array_equal(again.read(i), expected[i]) for i in range(24))
    assert {p.name: p.stat().st_ino for p in folder.glob("*.tar")} == shards  # not downloaded again
    uncached = pickle.loads(pickle.dumps(source.val))  # negative control: val's shards were never fetched
    with pytest.raises(DataError, match=rf"s3://{bucket}/once/val-0000\d.tar does not exist"):
        uncached.read(0)


def test_over_its_cap_the_cache_keeps_the_shard_in_use_only(copies, tmp_path):
    root, bucket = copies
    cache = tmp_path / "cache"
    train = load_or_generate_source(_data(f"s3://{bucket}/raw", cache_dir=cache, cache_max_gb=1e-6)).train
    expected = _samples(load_or_generate_source(_data(root / "raw")))
    for i in (0, 1, 2):  # shards 0, 1, 0: each evicts the other
        assert np.array_equal(train.read(i), expected[i])
        (folder,) = cache.iterdir()
        assert [p.name for p in folder.glob("*.tar")] == [f"train-0000{i % 2}.tar"]


def test_the_least_recently_used_shards_go_first_never_the_one_kept(tmp_path):
    folder = tmp_path / "key"
    folder.mkdir()
    for age, name in enumerate(["new.tar", "mid.tar", "old.tar", "kept.tar"]):
        (folder / name).write_bytes(b"x" * 100)
        os.utime(folder / name, (1000 - age, 1000 - age))
    (folder / "index-train.npy").write_bytes(b"x" * 1000)  # not a shard: never counted nor deleted
    deleted = delete_least_recently_used(tmp_path, 250, keep=folder / "kept.tar")
    assert [p.name for p in deleted] == ["old.tar", "mid.tar"]
    assert sorted(p.name for p in folder.iterdir()) == ["index-train.npy", "kept.tar", "new.tar"]
    assert delete_least_recently_used(tmp_path, 250, keep=folder / "kept.tar") == []  # under the cap now


def test_a_full_cache_disk_is_named_at_once_and_leaves_no_part_file(copies, tmp_path):
    root, bucket = copies
    cache = tmp_path / "cache"
    train = load_or_generate_source(_data(f"s3://{bucket}/raw", cache_dir=cache)).train
    folder = train.root.cache.folder
    folder.mkdir(parents=True, exist_ok=True)  # not made yet where this process fetched the index before
    # The kernel's /dev/full answers every write with ENOSPC, as a full disk does: the download of
    # shard 0 in this thread writes through it (a real small disk would need a mount of our own).
    part = folder / f".train-00000.tar.{os.getpid()}.{threading.get_ident()}.part"
    part.symlink_to("/dev/full")
    before = thread_retries()
    with pytest.raises(DataError) as caught:
        train.read(0)
    assert str(caught.value).startswith(f"no space left on the device holding data.cache_dir {cache} (")
    assert f"while caching s3://{bucket}/raw/train-00000.tar" in str(caught.value)
    assert "free some space there" in str(caught.value)
    assert thread_retries() == before  # no retry: the store is not at fault
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".part")]
    # negative control: with room again, it caches
    expected = load_or_generate_source(_data(root / "raw")).train.read(0)
    assert np.array_equal(train.read(0), expected) and (folder / "train-00000.tar").is_file()


def _fetch_when_all_are_ready(split, ready, index: int) -> None:
    ready.wait(60)  # the racers download the same shard at once
    split.root.cache.fetched(split.shards[0])
    split.read(index)


def test_processes_racing_on_a_shard_leave_one_whole_file(copies, tmp_path):
    root, bucket = copies
    cache = tmp_path / "cache"
    train = load_or_generate_source(_data(f"s3://{bucket}/jpeg", cache_dir=cache)).train
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(2)
    racers = [context.Process(target=_fetch_when_all_are_ready, args=(train, ready, i)) for i in (0, 2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(120)
    assert [racer.exitcode for racer in racers] == [0, 0]
    (folder,) = cache.iterdir()
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith("index-")) == ["train-00000.tar"]
    assert (folder / "train-00000.tar").read_bytes() == (root / "jpeg" / "train-00000.tar").read_bytes()


def test_storage_retries_made_by_workers_are_counted_in_the_telemetry(tmp_path, children):
    write_copy(tmp_path / "copy", image_format="raw")
    served = Served(tmp_path)
    try:
        source = load_or_generate_source(_data(f"{served.url}/copy"))
        size = (24, 24)
        augmenters = {"train": Augmenter([], list(size)), "val": Augmenter([], list(size))}
        settings = Settings(batch_size=4, image_size=size, queue=Queue(workers=2, timeout_s=60))
        with Enqueuer({"train": source.train, "val": source.val}, augmenters, settings) as loader:
            served.failing("train-00000.tar", "train-00001.tar")  # each shard's next ranged GET: a 503
            batches = list(loader.batches("train", np.arange(24), epoch=0))
            first = loader.telemetry.take("epoch")
            list(loader.batches("train", np.arange(24), epoch=1))
            second = loader.telemetry.take("epoch")
    finally:
        served.stop()
    assert len(batches) == 6 and first["storage_retries"] == 2
    assert second["storage_retries"] == 0  # negative control: the server answered every GET at once


def test_a_missing_copy_or_refused_credentials_stop_at_the_source(copies, s3, tmp_path):
    root, bucket = copies
    with pytest.raises(DataError, match=r"s3://no-such-bucket-here/copy/manifest.json does not exist"):
        load_or_generate_source(_data("s3://no-such-bucket-here/copy"))
    with pytest.raises(DataError, match=rf"s3://{bucket}/nothing/manifest.json does not exist"):
        load_or_generate_source(_data(f"s3://{bucket}/nothing"))
    private = new_bucket(s3)
    s3.put(str(root / "raw"), f"{private}/raw", recursive=True)  # no public-read: anonymous HTTP is refused
    url = f"{environment()['AWS_ENDPOINT_URL']}/{private}/raw"
    with pytest.raises(DataError, match=rf"{url}/manifest.json cannot be read with the credentials"):
        load_or_generate_source(_data(url))
    # negative control: with credentials it reads
    assert load_or_generate_source(_data(f"s3://{private}/raw")).class_names


def test_a_server_that_ignores_byte_ranges_is_refused_at_the_source(tmp_path, monkeypatch):
    write_copy(tmp_path / "copy", counts={"train": 3, "val": 3})
    served = Served(tmp_path)
    try:
        assert len(Store.at(f"{served.url}/copy").read_range("train-00000.tar", 0, 512)) == 512  # ranges answered
        monkeypatch.setattr(http_files._Ranged, "do_GET", SimpleHTTPRequestHandler.do_GET)  # now: 200, whole
        with pytest.raises(DataError, match="does not answer byte ranges"):
            load_or_generate_source(_data(f"{served.url}/copy"))
    finally:
        served.stop()


def test_storage_lost_while_training_stops_with_its_paragraph_not_as_a_bad_sample(tmp_path, monkeypatch):
    write_copy(tmp_path / "copy", image_format="raw", counts={"train": 6, "val": 3})
    served = Served(tmp_path)
    source = load_or_generate_source(_data(f"{served.url}/copy"))
    work = SimpleNamespace(splits={"train": source.train}, augmenters={"train": Augmenter([], [24, 24])}, seed=0,
                           on_bad_sample="skip")
    task = messages.Task(split="train", epoch=0, slot=0, items=[(0, 1)])
    ring = np.zeros((1, 1, 24, 24, 3), np.uint8)
    assert isinstance(fill(ring, task, work, messages.Item(0, 1)), messages.Written)  # negative control
    served.stop()  # the store goes away
    monkeypatch.setattr(storage, "FIRST_WAIT", 0.001)
    note = fill(ring, task, work, messages.Item(0, 2))
    assert isinstance(note, messages.Failed)  # not a bad sample to skip
    error = failure(note, "train", 0, "worker 1")
    assert isinstance(error, DataError) and not isinstance(error, BadSampleError)
    assert re.fullmatch(rf"worker 1 could not read sample 2 of the train split: {served.url}/copy/train-00000.tar "
                        r"could not be reached after 5 tries .*", str(error))
