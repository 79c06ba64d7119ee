"""app/data/sources/synthetic.py: reproducible generation, reuse, and safe concurrent generation."""

import multiprocessing
import os
import shutil
import socket
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
from PIL import Image

from app.data.pixels.images import load_rgb
from app.data.sources import drawing, synthetic
from app.data.sources.chosen import load_or_generate_source
from app.data.sources.synthetic import Spec, class_names, dataset_dir_name, ensure_dataset
from app.errors import DataError, MachineError
from app.io import write_json
from app.runs.rundata import run_source
from app.schema.data import DATA_TARGETS

SYNTH = DATA_TARGETS["synthetic"]
TINY = {"num_images": 24, "source_size": 64, "num_classes": 3}


def _files(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*.jpg"))}


def test_layout_and_names(tmp_path):
    folder = ensure_dataset(tmp_path, Spec(seed=0, **TINY), progress=False)
    assert folder == tmp_path / "v2-n24-s64-c3-seed0" == tmp_path / dataset_dir_name(24, 64, 3, 0)
    files = _files(folder)
    assert len(files) == 24
    assert sorted(p.name for p in folder.iterdir()) == ["00_red_circle", "01_green_square",
                                                       "02_blue_triangle"]
    assert "01_green_square/00004.jpg" in files  # image i belongs to class i mod 3
    assert all(len(list((folder / c).iterdir())) == 8 for c in class_names(3))
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no temporary folder left


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    one = _files(ensure_dataset(tmp_path / "one", Spec(seed=0, **TINY), progress=False))
    two = _files(ensure_dataset(tmp_path / "two", Spec(seed=0, **TINY), progress=False))
    other = _files(ensure_dataset(tmp_path / "one", Spec(seed=1, **TINY), progress=False))
    assert one == two
    assert one.keys() == other.keys()
    assert all(one[name] != other[name] for name in one)


def test_pool_writes_the_same_bytes_as_one_process(tmp_path, monkeypatch):
    serial = _files(ensure_dataset(tmp_path / "serial", Spec(seed=3, **TINY), progress=False))
    monkeypatch.setattr(synthetic, "POOL_MIN_PIXELS", 0)
    pooled = _files(ensure_dataset(tmp_path / "pool", Spec(seed=3, **TINY), progress=False))
    assert pooled == serial


def test_existing_dataset_is_reused(tmp_path, monkeypatch):
    folder = ensure_dataset(tmp_path, Spec(seed=0, **TINY), progress=False)
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*.jpg")}

    def fail(*args):
        raise AssertionError("regenerated")
    monkeypatch.setattr(synthetic, "_write_images", fail)
    assert ensure_dataset(tmp_path, Spec(seed=0, **TINY), progress=False) == folder
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*.jpg")} == before


def test_progress_goes_to_stderr(tmp_path, capsys):
    ensure_dataset(tmp_path, Spec(seed=0, num_images=6, source_size=32, num_classes=2), progress=True)
    out, err = capsys.readouterr()
    assert out == "" and "6/6" in err


def test_losing_the_rename_race_uses_the_winners_copy(tmp_path, monkeypatch):
    run = synthetic._write_images
    winner = {}

    def run_then_get_overtaken(*args):
        run(*args)
        # Another job finishes first, while this one is about to rename its copy.
        monkeypatch.setattr(synthetic, "_write_images", run)
        winner["folder"] = ensure_dataset(tmp_path, Spec(seed=0, **TINY), progress=False)
        winner["files"] = _files(winner["folder"])
    monkeypatch.setattr(synthetic, "_write_images", run_then_get_overtaken)

    folder = ensure_dataset(tmp_path, Spec(seed=0, **TINY), progress=False)
    assert folder == winner["folder"]
    assert _files(folder) == winner["files"] and len(winner["files"]) == 24
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]


def _ensure_in_child(root, queue):
    queue.put(str(ensure_dataset(root, Spec(seed=5, num_images=60, source_size=128, num_classes=3),
                                 progress=False)))


@pytest.mark.slow
def test_two_processes_at_once_make_one_complete_dataset(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_ensure_in_child, args=(str(tmp_path), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    paths = {queue.get(timeout=5), queue.get(timeout=5)}
    folder = tmp_path / dataset_dir_name(60, 128, 3, 5)
    assert paths == {str(folder)}
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]
    files = _files(folder)
    assert len(files) == 60 and all(len(b) > 1000 for b in files.values())
    assert files == _files(ensure_dataset(tmp_path / "check", Spec(seed=5, num_images=60, source_size=128,
                                                                   num_classes=3), progress=False))


def test_stale_temporary_folders_of_dead_jobs_are_removed(tmp_path):
    host = socket.gethostname()
    dead = multiprocessing.get_context("spawn").Process(target=os.getpid)
    dead.start()
    dead.join()
    stale = tmp_path / f".tmp-v2-n9-s64-c3-seed0-{host}-{dead.pid}-abcdef12"
    live = tmp_path / f".tmp-v2-n9-s64-c3-seed0-{host}-{os.getpid()}-abcdef12"
    foreign = tmp_path / f".tmp-v2-n9-s64-c3-seed0-elsewhere-{dead.pid}-abcdef12"
    for folder in (stale, live, foreign):
        (folder / "00_red_circle").mkdir(parents=True)
    ensure_dataset(tmp_path, Spec(seed=0, **TINY), progress=False)
    assert not stale.exists()
    assert live.exists() and foreign.exists()


def test_images_are_rgb_jpegs_of_a_few_sizes_and_aspect_ratios(tmp_path):
    src = load_or_generate_source(SimpleNamespace(_target_=SYNTH, task="multiclass", path=str(tmp_path),
                                                  val_fraction=0.25, seed=0, num_test_images=0, **TINY))
    images = [src.train.read(i) for i in range(len(src.train))]
    assert all(img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 for img in images)
    sides = {round(np.sqrt(img.shape[0] * img.shape[1])) for img in images}  # of a square of as many pixels
    assert sides <= {51, 64, 77} and len(sides) >= 2  # 0.8, 1 or 1.2 × source_size
    assert len({img.shape[:2] for img in images}) >= 5  # aspect ratios, landscape and portrait
    assert {img.shape[0] > img.shape[1] for img in images} == {True, False}
    assert all(img.std() > 20 for img in images)  # a cluttered background, not a flat fill


def _stored_orientation(path) -> int:
    with Image.open(path) as img:
        return img.getexif().get(0x0112, 1)


@pytest.mark.parametrize("draft", [False, True], ids=["full", "draft"])
def test_files_stored_turned_load_as_drawn(tmp_path, draft):
    folder = ensure_dataset(tmp_path, Spec(seed=0, num_images=24, source_size=256, num_classes=2), progress=False)
    paths = sorted(folder.rglob("*.jpg"), key=lambda p: p.name)
    orientations = [_stored_orientation(p) for p in paths]
    assert {3, 6, 8} <= set(orientations) and 1 in orientations  # some files carry a rotation, some none
    for i, (path, orientation) in enumerate(zip(paths, orientations, strict=True)):
        drawn = np.asarray(drawing.draw_image(np.random.default_rng([0, i]), 256, i % 2), np.float32)
        loaded = load_rgb(path, min_short_side=50 if draft else None)
        if draft:  # decoded at a reduced scale: compare with the drawing reduced alike
            drawn = cv2.resize(drawn, loaded.shape[1::-1], interpolation=cv2.INTER_AREA)
        assert loaded.shape == drawn.shape, (path.name, orientation)
        assert np.abs(loaded - drawn).mean() < 6, (path.name, orientation)
        if orientation in (3, 6, 8):  # negative control: the pixels as stored are not the drawing
            raw = cv2.imread(str(path), cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION).astype(np.float32)
            full = np.asarray(drawing.draw_image(np.random.default_rng([0, i]), 256, i % 2), np.float32)
            assert raw.shape != full.shape or np.abs(raw - full).mean() > 20


def test_a_run_on_another_generators_files_is_refused_before_generating(tmp_path, monkeypatch):
    data = SimpleNamespace(_target_=SYNTH, task="multiclass", path=str(tmp_path / "data"), val_fraction=0.25, seed=0,
                           num_test_images=0, **TINY)
    source = load_or_generate_source(data)
    run = tmp_path / "run"
    run.mkdir()
    write_json(run / "split.json", source.split)
    assert run_source(run, data).fingerprint == source.fingerprint  # the same generator: resumes

    old = dict(source.split, root=str(tmp_path / "data" / "v1-n24-s64-c3-seed0"))
    write_json(run / "split.json", old)
    shutil.rmtree(tmp_path / "data")

    def fail(*args):
        raise AssertionError("generated")
    monkeypatch.setattr(synthetic, "_write_images", fail)
    with pytest.raises(DataError, match=r"trained on synthetic images of generator v1 .* generates v2"):
        run_source(run, data)
    assert not (tmp_path / "data").exists()


def test_source_is_the_folder_split(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = SimpleNamespace(_target_=SYNTH, task="multiclass", path="datasets/synthetic", val_fraction=0.25, seed=0,
                          num_test_images=0, **TINY)
    src = load_or_generate_source(cfg)
    assert src.name == "synthetic" and src.split["source"] == "synthetic"
    assert src.class_names == ["00_red_circle", "01_green_square", "02_blue_triangle"]
    assert (len(src.train), len(src.val)) == (18, 6)
    assert np.bincount(src.val.labels).tolist() == [2, 2, 2]
    assert src.split["root"] == str(tmp_path / "datasets" / "synthetic" / "v2-n24-s64-c3-seed0")
    assert load_or_generate_source(cfg).fingerprint == src.fingerprint


def test_class_names_are_distinct_up_to_the_maximum():
    names = class_names(synthetic.MAX_CLASSES)
    styles = [name.split("_", 1)[1] for name in names]
    assert len(set(styles)) == synthetic.MAX_CLASSES == 48
    first = [name.split("_")[1:] for name in class_names(8)]
    assert len({c for c, _ in first}) == 6 and len({s for _, s in first}) == 8
    assert names == sorted(names)  # sorted names keep the class order (the folder source's labels)


@pytest.mark.parametrize("n", [1, 49])
def test_class_count_out_of_range(tmp_path, n):
    with pytest.raises(DataError, match=f"data.num_classes={n}: the synthetic dataset has 2 to 48"):
        ensure_dataset(tmp_path, Spec(num_images=100, source_size=32, num_classes=n, seed=0), progress=False)
    assert not any(tmp_path.iterdir())


def test_the_test_split_is_generated_apart_and_outside_the_fingerprint(tmp_path):
    def source(tests):
        return load_or_generate_source(SimpleNamespace(_target_=SYNTH, task="multiclass", path=str(tmp_path),
                                                       val_fraction=0.25, seed=0, num_test_images=tests, **TINY))

    none, some = source(0), source(None)  # null: a quarter of num_images
    assert none.test is None and len(some.test) == 24 // 4
    assert some.fingerprint == none.fingerprint and some.split["train"] == none.split["train"]
    # the test images continue the training images' indices: other images of the same classes
    names = sorted(Path(p).name for p in some.test.paths)
    assert names == [f"{i:05d}.jpg" for i in range(24, 30)]
    assert sorted(set(some.test.labels.tolist())) == [0, 1, 2]
    assert (tmp_path / "v2-n24-s64-c3-seed0-test6").is_dir()


def test_a_dataset_larger_than_the_free_disk_is_refused_before_any_file(tmp_path):
    """A billion images are refused at once, naming the key, instead of filling the disk (or the
    memory, with every image's job); the dataset that fits is generated (test_layout_and_names)."""
    with pytest.raises(MachineError, match=r"data\.num_images=1000000000 .* data\.source_size=1024 .* GiB free"):
        ensure_dataset(tmp_path, Spec(num_images=10**9, source_size=1024, num_classes=4, seed=0), progress=False)
    with pytest.raises(MachineError, match=r"lower data\.num_test_images"):
        ensure_dataset(tmp_path, Spec(num_images=10**9, source_size=1024, num_classes=4, seed=0, first=800),
                       progress=False)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_test_split_too_large_is_refused_before_the_training_images(tmp_path):
    data = SimpleNamespace(path=str(tmp_path / "synthetic"), num_images=24, source_size=64, num_classes=3, seed=0,
                           num_test_images=10**9, val_fraction=0.25)
    with pytest.raises(MachineError, match=r"lower data\.num_test_images"):
        synthetic.synthetic_source(data)
    assert not (tmp_path / "synthetic").exists() or not any((tmp_path / "synthetic").iterdir())
