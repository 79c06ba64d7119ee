"""app/data/copies/storage.py against a real S3 endpoint on localhost (moto's server through s3fs) and a
local folder: the same reads and writes, byte ranges, a Store that crosses a pickle, and the
paragraphs for a missing bucket, missing credentials, a missing driver and an endpoint that
does not answer (tried again with our waits alone, counted)."""

from __future__ import annotations

import pickle
import time

import pytest
import s3fs
from s3_endpoint import environment, new_bucket

from app.data.copies import storage
from app.data.copies.retries import thread_retries
from app.data.copies.storage import LocalStore, RemoteStore, Store
from app.errors import DataError


@pytest.fixture
def s3(monkeypatch):
    for name, value in environment().items():
        monkeypatch.setenv(name, value)
    return s3fs.S3FileSystem(skip_instance_cache=True)


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path, s3) -> Store:
    if request.param == "local":
        return Store.at(str(tmp_path / "copy"))
    return Store.at(f"s3://{new_bucket(s3)}/copy")


def test_a_store_reads_what_it_wrote_whole_and_by_range(store, tmp_path):
    assert not store.exists("a.bin")
    store.write_bytes("a.bin", b"0123456789")
    staged = tmp_path / "staged.tar"
    staged.write_bytes(b"x" * 100)
    store.put_file_and_delete_it(staged, "b.tar")
    assert not staged.exists()
    assert store.read_bytes("a.bin") == b"0123456789" and store.read_range("a.bin", 2, 3) == b"234"
    assert store.size("b.tar") == 100 and store.exists("b.tar")
    again = pickle.loads(pickle.dumps(store))  # as a worker process gets it: it opens its own filesystem
    assert again.read_range("b.tar", 98, 10) == b"xx"
    store.delete("a.bin")
    assert not store.exists("a.bin")
    assert isinstance(store, LocalStore) == (store.local is not None)


def test_a_url_is_a_remote_store_and_a_path_a_local_one(tmp_path):
    assert isinstance(Store.at("s3://bucket/copy"), RemoteStore) and isinstance(Store.at("https://h/c"), RemoteStore)
    assert isinstance(Store.at(str(tmp_path)), LocalStore) and isinstance(Store.at("relative/copy"), LocalStore)
    assert str(Store.at("s3://bucket/copy/")) == "s3://bucket/copy"


def test_a_store_names_what_is_under_it_and_tells_a_file_from_a_folder(store):
    assert store.names() == []  # absent: nothing under it yet
    store.write_bytes(".journal/plan.json", b"{}")  # a name in a subfolder: the subfolder made where needed
    store.write_bytes("b.tar", b"x")
    assert store.names() == [".journal", "b.tar"] and store.read_bytes(".journal/plan.json") == b"{}"
    file = Store.at(store.path_of("b.tar"))  # negative control: a location that is a file, not a folder
    assert file.names() is None
    if isinstance(store, RemoteStore):
        bucket = str(store).removeprefix("s3://").split("/")[0]
        with pytest.raises(DataError, match=rf"s3://no-such-{bucket}/copy does not exist"):
            Store.at(f"s3://no-such-{bucket}/copy").names()


def test_a_missing_bucket_or_object_is_one_paragraph_naming_the_url(s3):
    with pytest.raises(DataError, match=r"s3://no-such-bucket-here/copy/manifest.json does not exist"):
        Store.at("s3://no-such-bucket-here/copy").read_bytes("manifest.json")
    bucket = new_bucket(s3)
    with pytest.raises(DataError, match=rf"s3://{bucket}/copy/missing.tar does not exist"):
        Store.at(f"s3://{bucket}/copy").read_range("missing.tar", 0, 10)


def test_missing_credentials_are_named_without_retrying(s3, monkeypatch):
    bucket = new_bucket(s3)
    Store.at(f"s3://{bucket}").write_bytes("a", b"1")  # negative control: with them, it reads
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    before = thread_retries()
    with pytest.raises(DataError, match=rf"s3://{bucket}/a cannot be read with the credentials.*AWS_ACCESS_KEY_ID"):
        Store.at(f"s3://{bucket}", {"skip_instance_cache": True}).read_bytes("a")
    assert thread_retries() == before


def test_a_missing_driver_names_the_extra_that_brings_it():
    with pytest.raises(DataError, match=r"gcsfs \(pip install 'app\[gcs\]'\)"):
        Store.at("gs://bucket/copy").read_bytes("manifest.json")


def test_a_dead_endpoint_is_tried_again_with_our_waits_alone_then_named(monkeypatch):
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    monkeypatch.delenv("AWS_RETRY_MODE", raising=False)
    options = {"endpoint_url": "http://127.0.0.1:1", "key": "k", "secret": "s"}  # a closed port
    store, before, started = Store.at("s3://bucket/copy", options), thread_retries(), time.monotonic()
    with pytest.raises(DataError, match=rf"could not be reached after {storage.TRIES} tries"):
        store.read_bytes("manifest.json")
    # Our waits are 3 s in all; botocore's own retries beneath each try made it 20 to 50 s.
    assert time.monotonic() - started < 15
    assert thread_retries() - before == storage.TRIES - 1
    config = store.fs.s3.meta.config
    assert config.retries == {"total_max_attempts": 1, "mode": "standard"} and config.connect_timeout == 5
    mine = {**options, "config_kwargs": {"retries": {"max_attempts": 3}}}  # the user's own settings win
    assert Store.at("s3://bucket/copy", mine).fs.s3.meta.config.retries["total_max_attempts"] == 4
