"""app/data/sources/cifar.py: a tiny CIFAR-10 in the real pickle format, from a folder, a tar.gz, ~/.keras,
and a file:// "download" (tests never touch the network)."""

import hashlib
import json
import pickle
import shutil
import tarfile
from types import SimpleNamespace

import numpy as np
import pytest

from app.data.sources import cifar
from app.data.sources.chosen import load_or_generate_source
from app.errors import BadSampleError, DataError
from app.schema.data import DATA_TARGETS

LABEL_NAMES = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse",
               b"ship", b"truck"]
ROWS = {**{f"data_batch_{i}": 4 for i in range(1, 6)}, "test_batch": 3}
TRAIN_ROWS = 20


def _dump(obj) -> bytes:
    # Like the official files: protocol 2, numpy arrays recorded under numpy.core (numpy 1).
    return pickle.dumps(obj, protocol=2).replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


def _write_batches(folder, seed=0) -> dict:
    """Writes cifar-10-batches-py/ into `folder`; returns {batch name: (data, labels)}."""
    rng = np.random.default_rng(seed)
    out = folder / "cifar-10-batches-py"
    out.mkdir(parents=True)
    batches = {}
    for name, n in ROWS.items():
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 4, n)]  # a few rows a class, for validation
        batches[name] = (data, labels)
        blob = _dump({b"batch_label": name.encode(), b"labels": labels, b"data": data,
                      b"filenames": [b"x.png"] * n})
        assert b"cnumpy.core.multiarray\n_reconstruct" in blob
        (out / name).write_bytes(blob)
    (out / "batches.meta").write_bytes(_dump({b"label_names": LABEL_NAMES, b"num_cases_per_batch": 2,
                                              b"num_vis": 3072}))
    return batches


def _write_archive(folder, seed=0):
    staging = folder / f"staging{seed}"
    batches = _write_batches(staging, seed)
    archive = folder / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(staging / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return archive, batches


def _cfg(path, download=False, val_fraction=0.2):
    return SimpleNamespace(_target_=DATA_TARGETS["cifar"], path=str(path), download=download, val_fraction=val_fraction)


@pytest.fixture(autouse=True)
def data_no_home_cifar(tmp_path, monkeypatch):
    """An empty home, so a real ~/.keras/datasets on this machine is never found."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def _check(src, batches):
    assert src.name == "cifar"
    assert src.class_names == [n.decode() for n in LABEL_NAMES]
    train_data = np.concatenate([batches[f"data_batch_{i}"][0] for i in range(1, 6)])
    labels = np.array([v for i in range(1, 6) for v in batches[f"data_batch_{i}"][1]])
    # validation: a fifth of each class of the training batches, the rest trains; the test batch is the test split
    rows = {"train": src.split["train"], "val": src.split["val"]}
    assert sorted(rows["train"] + rows["val"]) == list(range(TRAIN_ROWS))
    for c in range(4):
        n = int((labels == c).sum())
        assert sum(labels[r] == c for r in rows["val"]) == (min(max(1, round(n * 0.2)), n - 1) if n >= 2 else 0)
    for split in ("train", "val"):
        part = getattr(src, split)
        assert part.labels.tolist() == labels[rows[split]].tolist()
        for i, row in enumerate(rows[split]):
            img = part.read(i)
            assert img.shape == (32, 32, 3) and img.dtype == np.uint8 and img.flags.c_contiguous
            # Row layout: 1024 red bytes, 1024 green, 1024 blue, each plane row-major.
            for y, x in ((0, 0), (1, 2), (31, 5)):
                assert img[y, x].tolist() == [train_data[row, c * 1024 + y * 32 + x] for c in range(3)]
    test_data, test_labels = batches["test_batch"]
    assert src.test.labels.tolist() == test_labels and src.split["test"] == [0, 1, 2]
    assert src.test.read(2)[31, 31].tolist() == [test_data[2, 1023], test_data[2, 2047], test_data[2, 3071]]
    assert src.split["split_version"] == cifar.SPLIT_VERSION == 2 and src.split["val_fraction"] == 0.2
    assert src.split["class_names"] == src.class_names and src.split["fingerprint"] == src.fingerprint


def test_reads_extracted_folder(tmp_path):
    batches = _write_batches(tmp_path)
    src = load_or_generate_source(_cfg(tmp_path))
    _check(src, batches)
    row = src.split["train"][3]
    assert src.train.describe(3) == f"CIFAR-10 training batches row {row} ({tmp_path / 'cache' / 'train_x.npy'})"
    assert (tmp_path / "cache" / "test_x.npy").is_file()


def test_reads_tar_gz_without_extracting(tmp_path):
    archive, batches = _write_archive(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    archive.rename(data / archive.name)
    src = load_or_generate_source(_cfg(data))
    _check(src, batches)
    assert sorted(p.name for p in data.iterdir()) == ["cache", "cifar-10-python.tar.gz"]


def test_same_data_same_fingerprint_wherever_it_comes_from(tmp_path):
    from_folder = load_or_generate_source(_cfg(_folder_with_batches(tmp_path / "a")))
    archive, _ = _write_archive(tmp_path / "b")
    from_archive = load_or_generate_source(_cfg(archive.parent))
    assert from_folder.fingerprint == from_archive.fingerprint
    assert len(from_folder.fingerprint) == 64


def _folder_with_batches(folder, seed=0):
    _write_batches(folder, seed)
    return folder


def test_cache_is_reused_and_rebuilt_when_the_source_changes(tmp_path, monkeypatch):
    archive, _ = _write_archive(tmp_path)
    first = load_or_generate_source(_cfg(tmp_path))

    def fail(*args):
        raise AssertionError("cache rebuilt")
    with monkeypatch.context() as m:
        m.setattr(cifar, "_write_cache", fail)
        again = load_or_generate_source(_cfg(tmp_path))
    assert again.fingerprint == first.fingerprint

    archive.unlink()
    _, batches = _write_archive(tmp_path, seed=1)
    changed = load_or_generate_source(_cfg(tmp_path))
    assert changed.fingerprint != first.fingerprint
    _check(changed, batches)
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_keras_cache_locations_are_found(tmp_path):
    keras = tmp_path / "home" / ".keras" / "datasets" / "cifar-10-batches-py-target"
    batches = _write_batches(keras)
    src = load_or_generate_source(_cfg(tmp_path / "data"))
    _check(src, batches)
    assert src.split["root"] == str(keras / "cifar-10-batches-py")
    assert (tmp_path / "data" / "cache" / "train_x.npy").is_file()


def test_array_split_pickles_without_the_array(tmp_path):
    _write_batches(tmp_path)
    src = load_or_generate_source(_cfg(tmp_path))
    expected = src.train.read(4)  # opens the memmap in this process
    blob = pickle.dumps(src.train)
    assert len(blob) < 2000
    clone = pickle.loads(blob)
    assert np.array_equal(clone.read(4), expected)
    assert clone.read(4).flags.writeable


def test_unreadable_cache_row_is_a_bad_sample(tmp_path):
    _write_batches(tmp_path)
    src = load_or_generate_source(_cfg(tmp_path))
    (tmp_path / "cache" / "test_x.npy").write_bytes(b"garbage")
    with pytest.raises(BadSampleError) as bad:
        src.test.read(1)
    assert bad.value.where == f"CIFAR-10 test batch row 1 ({tmp_path / 'cache' / 'test_x.npy'})"


def test_missing_cifar_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as err:
        load_or_generate_source(_cfg("datasets/cifar10"))
    message = str(err.value)
    where = tmp_path / "datasets" / "cifar10"
    assert f"Put the official archive at {where / 'cifar-10-python.tar.gz'}" in message
    assert f"{where / 'cifar-10-batches-py'}/" in message
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in message
    assert "data.download=true" in message
    assert not where.exists()  # nothing created, nothing fetched


def test_incomplete_folder_names_what_is_missing(tmp_path):
    _write_batches(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DataError, match="not a complete CIFAR-10.*missing data_batch_3"):
        load_or_generate_source(_cfg(tmp_path))


def test_refuses_pickles_that_build_other_objects(tmp_path):
    _write_batches(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(
        pickle.dumps({b"data": SimpleNamespace(), b"labels": []}))
    with pytest.raises(DataError, match="unexpected object types.SimpleNamespace"):
        load_or_generate_source(_cfg(tmp_path))
    assert not (tmp_path / "cache").exists()


def test_a_label_outside_the_ten_classes_or_an_empty_batch_file_is_named(tmp_path):
    batches = _write_batches(tmp_path)
    data, labels = batches["data_batch_2"]
    labels[3] = 99
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").write_bytes(_dump({b"labels": labels, b"data": data}))
    with pytest.raises(DataError, match="data_batch_2 is not a CIFAR-10 batch: row 3 has label 99, where CIFAR-10's"):
        load_or_generate_source(_cfg(tmp_path))
    labels[3] = 9  # negative control: the highest label there is
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").write_bytes(_dump({b"labels": labels, b"data": data}))
    assert len(load_or_generate_source(_cfg(tmp_path)).train) > 0
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").write_bytes(b"")
    with pytest.raises(DataError, match=r"cannot read CIFAR-10 from \S+/cifar-10-batches-py/data_batch_4: Ran out"):
        load_or_generate_source(_cfg(tmp_path))



def test_label_names_that_are_not_ten_distinct_names_are_named(tmp_path):
    """batches.meta with fewer names than the labels use, or one name twice (per-class metrics
    would fold into one column), is refused naming the file; pixel values beyond 0..255 are not
    wrapped into uint8."""
    batches = _write_batches(tmp_path)
    meta = tmp_path / "cifar-10-batches-py" / "batches.meta"
    for names in (LABEL_NAMES[:3], [b"cat"] * 10):
        meta.write_bytes(_dump({b"label_names": names}))
        with pytest.raises(DataError, match=r"batches.meta's label_names are not 10 distinct names"):
            load_or_generate_source(_cfg(tmp_path))
    meta.write_bytes(_dump({b"label_names": LABEL_NAMES}))
    load_or_generate_source(_cfg(tmp_path))
    cached = tmp_path / "cache" / "meta.json"  # as a version that did not check would have cached three names
    cached.write_text(json.dumps({**json.loads(cached.read_text()), "version": 2, "class_names": ["a", "b", "c"]}))
    assert load_or_generate_source(_cfg(tmp_path)).class_names == [n.decode() for n in LABEL_NAMES]  # rebuilt, checked
    data, labels = batches["data_batch_5"]
    wide = data.astype(np.int64)
    wide[2, 7] = 300
    (tmp_path / "cifar-10-batches-py" / "data_batch_5").write_bytes(_dump({b"labels": labels, b"data": wide}))
    with pytest.raises(DataError, match=r"data_batch_5 is not a CIFAR-10 batch: row 2 holds the value 300"):
        load_or_generate_source(_cfg(tmp_path))
    wide[2, 7] = 255  # negative control: int64 within 0..255 reads as the official uint8 would
    (tmp_path / "cifar-10-batches-py" / "data_batch_5").write_bytes(_dump({b"labels": labels, b"data": wide}))
    assert len(load_or_generate_source(_cfg(tmp_path)).train) > 0

def test_download_from_url_with_good_md5(tmp_path, monkeypatch):
    archive, batches = _write_archive(tmp_path / "server")
    monkeypatch.setattr(cifar, "URL", archive.as_uri())
    monkeypatch.setattr(cifar, "MD5", hashlib.md5(archive.read_bytes()).hexdigest())
    data = tmp_path / "data"
    with pytest.raises(DataError):
        load_or_generate_source(_cfg(data))  # download is off by default
    src = load_or_generate_source(_cfg(data, download=True))
    _check(src, batches)
    assert (data / "cifar-10-python.tar.gz").read_bytes() == archive.read_bytes()
    assert not (data / "cifar-10-python.tar.gz.part").exists()


def test_download_with_bad_md5_deletes_the_file(tmp_path, monkeypatch):
    archive, _ = _write_archive(tmp_path / "server")
    monkeypatch.setattr(cifar, "URL", archive.as_uri())
    monkeypatch.setattr(cifar, "MD5", "0" * 32)
    data = tmp_path / "data"
    with pytest.raises(DataError) as err:
        load_or_generate_source(_cfg(data, download=True))
    assert f"has md5 {hashlib.md5(archive.read_bytes()).hexdigest()}, expected {'0' * 32}" in str(err.value)
    assert list(data.iterdir()) == []


def test_download_failure_is_a_data_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cifar, "URL", (tmp_path / "absent.tar.gz").as_uri())
    with pytest.raises(DataError, match="could not download CIFAR-10 from file://"):
        load_or_generate_source(_cfg(tmp_path / "data", download=True))
    assert list((tmp_path / "data").iterdir()) == []


def test_official_constants():
    assert cifar.URL == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert cifar.MD5 == "c58f30108f718f92721af3b95e74349a"


def test_the_test_batch_stays_outside_the_fingerprint(tmp_path):
    first = load_or_generate_source(_cfg(_folder_with_batches(tmp_path / "a")))
    (tmp_path / "b").mkdir()
    shutil.copytree(tmp_path / "a" / "cifar-10-batches-py", tmp_path / "b" / "cifar-10-batches-py")
    test_batch = tmp_path / "b" / "cifar-10-batches-py" / "test_batch"
    test_batch.write_bytes(_dump({b"labels": [1], b"data": np.zeros((1, 3072), np.uint8)}))
    changed_test = load_or_generate_source(_cfg(tmp_path / "b"))
    assert changed_test.fingerprint == first.fingerprint and len(changed_test.test) == 1
    # negative control: a training batch changed is another fingerprint
    train_batch = tmp_path / "b" / "cifar-10-batches-py" / "data_batch_2"
    train_batch.write_bytes(_dump({b"labels": [1] * 4, b"data": np.zeros((4, 3072), np.uint8)}))
    assert load_or_generate_source(_cfg(tmp_path / "b")).fingerprint != first.fingerprint
    # the validation fraction moves rows between train and val, never out of the data
    tenth = load_or_generate_source(_cfg(tmp_path / "a", val_fraction=0.5))
    assert tenth.fingerprint == first.fingerprint and len(tenth.val) > len(first.val)


def test_runs_on_the_first_split_are_refused(tmp_path):
    from app.runs.rundata import run_source

    _write_batches(tmp_path / "data")
    src = load_or_generate_source(_cfg(tmp_path / "data"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "split.json").write_text(json.dumps(src.split))
    assert run_source(run, _cfg(tmp_path / "data")).fingerprint == src.fingerprint  # negative control
    old = {k: v for k, v in src.split.items() if k not in ("split_version", "test")}
    (run / "split.json").write_text(json.dumps(old))
    with pytest.raises(DataError) as err:
        run_source(run, _cfg(tmp_path / "data"))
    assert "CIFAR-10 split version 1, where the official test batch was the validation split" in str(err.value)
    assert "Start a new run" in str(err.value)


def test_a_truncated_archive_is_named_with_the_file_to_put_in_its_place(tmp_path):
    archive, _ = _write_archive(tmp_path)
    archive.write_bytes(archive.read_bytes()[:len(archive.read_bytes()) // 2])
    with pytest.raises(DataError, match=r"cifar-10-python.tar.gz: .*Replace the archive with the official "
                                        r"cifar-10-python.tar.gz from https://"):
        load_or_generate_source(_cfg(tmp_path))
