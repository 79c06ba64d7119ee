"""app/data/sources/folder.py: layouts, the deterministic val_fraction split, fingerprint, error messages."""

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from app.data.sources.chosen import load_or_generate_source
from app.data.sources.folder import FINGERPRINT_COVERS, Held, folder_source, split_by_fraction
from app.errors import ConfigError, DataError
from app.schema.data import DATA_TARGETS, FolderDataConfig


def _image(path, value=0, size=(6, 4)):
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".webp": "WEBP", ".bmp": "BMP",
           ".tif": "TIFF", ".tiff": "TIFF"}[path.suffix.lower()]
    Image.new("RGB", size, (value, value, value)).save(path, fmt)


def _tree(root, counts: dict[str, int], ext=".png"):
    for cls, n in counts.items():
        for i in range(n):
            _image(root / cls / f"{cls}{i:03d}{ext}", value=i)
    return root


def test_class_folders_labels_and_reading(tmp_path):
    root = tmp_path / "imgs"
    _image(root / "dog" / "a.JPG", 10)
    _image(root / "dog" / "nested" / "b.Png", 20)
    _image(root / "cat" / "c.jpeg", 30)
    _image(root / "cat" / "d.webp", 40)
    _image(root / "cat" / "e.BMP", 50)
    _image(root / "cat" / "f.TIFF", 60)
    _image(root / "cat" / ".hidden.png", 70)
    _image(root / "cat" / ".cache" / "g.png", 80)
    (root / "cat" / "notes.txt").write_text("not an image")
    (root / "cat" / ".DS_Store").write_bytes(b"\0")
    _image(root / ".thumbs" / "h.png", 90)  # a hidden folder is not a class

    src = folder_source(root, val_fraction=0.25)
    assert src.name == "folder" and src.class_names == ["cat", "dog"]
    rel = src.split["train"] + src.split["val"]
    assert sorted(rel) == ["cat/c.jpeg", "cat/d.webp", "cat/e.BMP", "cat/f.TIFF", "dog/a.JPG",
                           "dog/nested/b.Png"]
    assert (len(src.train), len(src.val)) == (4, 2)  # one val image a class
    for split, names in ((src.train, src.split["train"]), (src.val, src.split["val"])):
        assert split.labels.dtype == np.int64
        for i, name in enumerate(names):
            assert split.labels[i] == (0 if name.startswith("cat/") else 1)
            assert split.describe(i) == str(root / name)
            value = int(split.read(i)[0, 0, 0])
            assert abs(value - {"a": 10, "b": 20, "c": 30, "d": 40, "e": 50, "f": 60}[name.split("/")[-1][0]]) <= 2


def test_split_json_is_complete_and_json_able(tmp_path):
    src = folder_source(_tree(tmp_path / "d", {"a": 5, "b": 5}), val_fraction=0.2)
    split = json.loads(json.dumps(src.split))
    assert split == {"source": "folder", "fingerprint": src.fingerprint, "class_names": ["a", "b"],
                     "root": str(tmp_path / "d"), "train": split["train"], "val": split["val"],
                     "val_fraction": 0.2, "fingerprint_covers": FINGERPRINT_COVERS,
                     "names_sizes_fingerprint": src.names_sizes_fingerprint, "test": None,
                         "test_fraction": None}
    assert len(split["train"]) == 8 and len(split["val"]) == 2
    assert [src.train.describe(i) for i in range(8)] == [str(tmp_path / "d" / r) for r in split["train"]]
    assert len(src.fingerprint) == 64 and int(src.fingerprint, 16) >= 0


@pytest.mark.parametrize("n,fraction,n_val", [(10, 0.2, 2), (10, 0.25, 2), (11, 0.25, 3), (2, 0.1, 1),
                                              (3, 0.9, 2), (1, 0.5, 0), (100, 0.05, 5)])
def test_val_count_per_class(n, fraction, n_val):
    files = [(f"c/{i:03d}.png", 1) for i in range(n)]
    train, val = split_by_fraction(files, fraction)
    assert len(val) == n_val and len(train) == n - n_val
    assert sorted(train + val) == files


def test_split_is_deterministic_and_stable(tmp_path):
    first = folder_source(_tree(tmp_path / "one", {"a": 20, "b": 15}), 0.2)
    # Files created in another order, in another place: the same split.
    other = tmp_path / "two"
    for cls, n in (("b", 15), ("a", 20)):
        for i in reversed(range(n)):
            _image(other / cls / f"{cls}{i:03d}.png", value=i)
    for path in [*(tmp_path / "one").rglob("*.png"), *other.rglob("*.png")]:  # one time, whenever each was written:
        os.utime(path, (1_700_000_000, 1_700_000_000))  # the fingerprint counts whole seconds
    first, second = folder_source(tmp_path / "one", 0.2), folder_source(other, 0.2)
    assert (second.split["train"], second.split["val"]) == (first.split["train"], first.split["val"])
    assert second.fingerprint == first.fingerprint
    assert len(first.split["val"]) == 4 + 3
    # Ranked by hash, not by name: neither the first nor the last names of a class.
    val_a = [r for r in first.split["val"] if r.startswith("a/")]
    assert val_a not in (["a/a000.png", "a/a001.png", "a/a002.png", "a/a003.png"],
                         ["a/a016.png", "a/a017.png", "a/a018.png", "a/a019.png"])

    # One more image in class a leaves class b's split alone, and a's earlier val images stay val.
    _image(tmp_path / "one" / "a" / "a999.png")
    third = folder_source(tmp_path / "one", 0.2)
    assert [r for r in third.split["val"] if r.startswith("b/")] == \
           [r for r in first.split["val"] if r.startswith("b/")]
    assert {r for r in first.split["val"] if r.startswith("a/")} <= set(third.split["val"])
    assert third.fingerprint != first.fingerprint


def test_fingerprint_tracks_sizes_and_names(tmp_path):
    root = _tree(tmp_path / "d", {"a": 3, "b": 3})
    base = folder_source(root, 0.3).fingerprint
    assert folder_source(root, 0.5).fingerprint == base  # the split does not change the data
    _image(root / "a" / "a000.png", size=(60, 40))
    resized = folder_source(root, 0.3).fingerprint
    assert resized != base
    (root / "a" / "a000.png").rename(root / "a" / "renamed.png")
    assert folder_source(root, 0.3).fingerprint not in (base, resized)


def test_given_train_val_split(tmp_path):
    root = tmp_path / "d"
    _tree(root / "train", {"x": 3, "y": 2, "z": 1})
    _tree(root / "val", {"x": 1, "y": 2})  # a class may be absent from val
    src = folder_source(root, val_fraction=0.2)
    assert src.class_names == ["x", "y", "z"]
    assert src.split["val_fraction"] is None
    assert src.split["train"] == ["train/x/x000.png", "train/x/x001.png", "train/x/x002.png",
                                  "train/y/y000.png", "train/y/y001.png", "train/z/z000.png"]
    assert src.train.labels.tolist() == [0, 0, 0, 1, 1, 2]
    assert src.split["val"] == ["val/x/x000.png", "val/y/y000.png", "val/y/y001.png"]
    assert src.val.labels.tolist() == [0, 1, 1]


def test_file_split_pickles_small(tmp_path):
    src = folder_source(_tree(tmp_path / "d", {"a": 30, "b": 30}), 0.2)
    clone = pickle.loads(pickle.dumps(src.train))
    assert len(pickle.dumps(src.train)) < 100 * len(src.train)
    assert np.array_equal(clone.read(5), src.train.read(5))
    assert clone.labels.tolist() == src.train.labels.tolist()


def test_load_or_generate_source_resolves_relative_paths(tmp_path, monkeypatch):
    _tree(tmp_path / "rel", {"a": 2, "b": 2})
    monkeypatch.chdir(tmp_path)
    cfg = FolderDataConfig(path="rel", val_fraction=0.5)
    src = load_or_generate_source(cfg)
    assert src.split["root"] == str(tmp_path / "rel")
    monkeypatch.chdir("/")
    assert src.train.read(0).shape == (4, 6, 3)  # absolute paths: independent of the cwd


def test_load_or_generate_source_rejects_unknown_names_and_missing_path():
    with pytest.raises(ConfigError, match="data._target_.*'imagenet'"):
        load_or_generate_source(SimpleNamespace(_target_="imagenet", path="x", val_fraction=0.2))
    for name in ("folder", "synthetic", "cifar"):
        with pytest.raises(ConfigError, match=f"`data.path` is not set: data={name} needs a folder"):
            load_or_generate_source(SimpleNamespace(_target_=DATA_TARGETS[name], path=None, val_fraction=0.2))


# --- every DataError, with its message ------------------------------------------------------

def _error(path, fraction=0.2) -> str:
    with pytest.raises(DataError) as err:
        folder_source(path, fraction)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_error_missing_path(tmp_path):
    message = _error(tmp_path / "nowhere")
    assert f"data.path {tmp_path / 'nowhere'} does not exist" in message
    assert "<path>/<class>/<image>" in message and "<path>/train/<class>/<image>" in message


def test_error_path_is_a_file(tmp_path):
    _image(tmp_path / "x.png")
    assert "is not a folder" in _error(tmp_path / "x.png")


def test_error_no_class_folders(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".git").mkdir()
    message = _error(tmp_path / "empty")
    assert f"{tmp_path / 'empty'} has no class folders" in message
    assert "move them" not in message

    _image(tmp_path / "loose" / "a.jpg")
    _image(tmp_path / "loose" / "b.png")
    message = _error(tmp_path / "loose")
    assert f"{tmp_path / 'loose'} has no class folders" in message
    assert "It holds 2 images directly: move them into class folders." in message


def test_error_class_without_images(tmp_path):
    root = _tree(tmp_path / "d", {"a": 2})
    (root / "b").mkdir()
    (root / "b" / "readme.txt").write_text("x")
    _image(root / "b" / ".hidden.png")
    message = _error(root)
    assert f"class folder {root / 'b'} has no images" in message
    assert ".jpg .jpeg .png .webp .bmp .tif .tiff" in message


def test_error_val_class_not_in_train(tmp_path):
    root = tmp_path / "d"
    _tree(root / "train", {"a": 2, "b": 2})
    _tree(root / "val", {"a": 1, "c": 1})
    message = _error(root)
    assert f"{root / 'val' / 'c'} is a validation class that {root / 'train'} does not have" in message
    assert "train classes: a, b" in message


def test_error_given_split_with_empty_val_class(tmp_path):
    root = tmp_path / "d"
    _tree(root / "train", {"a": 2})
    (root / "val" / "a").mkdir(parents=True)
    assert f"class folder {root / 'val' / 'a'} has no images" in _error(root)


def test_error_train_without_val(tmp_path):
    root = tmp_path / "d"
    _tree(root / "train", {"a": 2, "b": 2})
    message = _error(root)
    assert f"{root / 'train'} holds class folders but its sibling {root / 'val'} is missing" in message


def test_error_no_validation_image(tmp_path):
    root = _tree(tmp_path / "d", {"a": 1, "b": 1, "c": 1})
    message = _error(root, 0.3)
    assert f"{root} leaves no validation image" in message and "data.val_fraction=0.3" in message


def test_copy_of_tree_keeps_fingerprint(tmp_path):
    root = _tree(tmp_path / "d", {"a": 4, "b": 4})
    shutil.copytree(root, tmp_path / "copy")
    assert folder_source(tmp_path / "copy", 0.2).fingerprint == folder_source(root, 0.2).fingerprint


def test_fingerprint_covers_modification_times(tmp_path):
    """A same-size content change went unnoticed (names + sizes only)."""
    root = _tree(tmp_path / "d", {"a": 3, "b": 3}, ext=".bmp")  # uncompressed: the size is the shape's
    target = root / "a" / "a001.bmp"
    size, before = target.stat().st_size, folder_source(root, 0.3)
    _image(target, value=200)  # new pixels, the same size in bytes
    os.utime(target, (target.stat().st_atime, target.stat().st_mtime + 5))
    after = folder_source(root, 0.3)
    assert target.stat().st_size == size
    assert after.names_sizes_fingerprint == before.names_sizes_fingerprint  # negative control: the old one misses it
    assert after.fingerprint != before.fingerprint


def test_check_same_data_says_what_changed(tmp_path):
    from app.runs.rundata import check_same_data

    root = _tree(tmp_path / "d", {"a": 3, "b": 3})
    run = tmp_path / "run"
    run.mkdir()
    (run / "split.json").write_text(json.dumps(folder_source(root, 0.3).split))
    check_same_data(run, folder_source(root, 0.3))  # unchanged: passes
    os.utime(root / "a" / "a001.png", (0, 12345))
    with pytest.raises(DataError, match="Only modification times differ"):
        check_same_data(run, folder_source(root, 0.3))
    # a run recorded before times were covered compares names and sizes, as it did
    legacy = {k: v for k, v in folder_source(tmp_path / "d", 0.3).split.items()
              if k not in ("fingerprint_covers", "names_sizes_fingerprint")}
    legacy["fingerprint"] = folder_source(root, 0.3).names_sizes_fingerprint
    (run / "split.json").write_text(json.dumps(legacy))
    check_same_data(run, folder_source(root, 0.3))
    (run / "split.json").write_text('{"fingerprint": ')
    with pytest.raises(DataError, match=r"split.json cannot be read .*restore it"):
        check_same_data(run, folder_source(root, 0.3))


def test_error_a_single_class(tmp_path):
    """One class trained and reported accuracy 0.000."""
    root = _tree(tmp_path / "d", {"cats": 4})
    assert f"{root} has one class folder (cats): a classifier needs at least 2 classes" in _error(root)
    _tree(root, {"dogs": 2})
    assert folder_source(root, 0.3).class_names == ["cats", "dogs"]  # negative control


def test_error_a_symlink_loop(tmp_path):
    """A symbolic link back up the tree recursed until Python gave up."""
    root = _tree(tmp_path / "d", {"a": 2, "b": 2})
    (root / "a" / "nested").mkdir()
    (root / "a" / "nested" / "up").symlink_to(root / "a")
    message = _error(root)
    assert f"{root / 'a' / 'nested' / 'up'} is a symbolic link loop" in message and "remove the link" in message
    above = _tree(tmp_path / "e", {"a": 2, "b": 2})
    (above / "b" / "up").symlink_to("..")  # to data.path itself: the loop shows at b/up/b, the link is b/up
    assert _error(above).startswith(f"{above / 'b' / 'up'} is a symbolic link loop (it leads back to {above}, a folder")
    (root / "a" / "nested" / "up").unlink()
    outside = _tree(tmp_path / "outside", {"c": 2}) / "c"
    (root / "a" / "nested" / "side").symlink_to(outside, target_is_directory=True)  # not a loop: followed
    assert len(folder_source(root, 0.3).train) + len(folder_source(root, 0.3).val) == 6


def test_links_to_nowhere_are_bad_samples_not_crashes(tmp_path):
    """An image-named link in a loop or to a missing file stays in the split, so the loader
    reports it by data.on_bad_sample, as any unreadable file; its mending changes the fingerprint."""
    from app.errors import BadSampleError

    root = _tree(tmp_path / "d", {"a": 3, "b": 3})
    (root / "a" / "loop.jpg").symlink_to(root / "a" / "loop.jpg")
    (root / "b" / "gone.png").symlink_to(tmp_path / "missing.png")
    (root / "b" / "notes.txt").symlink_to(tmp_path / "missing.txt")  # not an image name: ignored
    source = folder_source(root, 0.3)
    paths = source.train.paths + source.val.paths
    assert len(paths) == 8 and {os.path.basename(p) for p in paths} >= {"loop.jpg", "gone.png"}
    split = source.train if str(root / "a" / "loop.jpg") in source.train.paths else source.val
    with pytest.raises(BadSampleError, match="loop.jpg.*Too many levels of symbolic links"):
        split.read(split.paths.index(str(root / "a" / "loop.jpg")))
    (root / "a" / "loop.jpg").unlink()
    _image(root / "a" / "loop.jpg")
    assert folder_source(root, 0.3).fingerprint != source.fingerprint


def test_error_a_class_folder_link_in_a_loop(tmp_path):
    root = _tree(tmp_path / "d", {"a": 2, "b": 2})
    (root / "c").symlink_to(root / "c")
    message = _error(root)
    assert f"{root / 'c'} is a symbolic link that cannot be followed (Too many levels of symbolic links)" in message
    (root / "c").unlink()
    elsewhere = _tree(tmp_path / "elsewhere", {"c": 2}) / "c"
    (root / "c").symlink_to(elsewhere, target_is_directory=True)  # negative control: a link to a folder is a class
    assert folder_source(root, 0.3).class_names == ["a", "b", "c"]


def test_error_a_file_name_that_is_not_utf8(tmp_path):
    """A Latin-1 file name failed as an unexpected UnicodeEncodeError."""
    root = _tree(tmp_path / "d", {"a": 2, "b": 2})
    raw = os.path.join(os.fsencode(root / "a"), b"caf\xe9.png")
    with open(raw, "wb") as f:
        f.write((root / "a" / "a000.png").read_bytes())
    message = _error(root)
    assert "caf\\xe9.png has a file name that is not valid UTF-8" in message and "rename it" in message


def test_a_test_split_beside_train_and_val_or_by_test_path_outside_the_fingerprint(tmp_path):
    root = tmp_path / "d"
    _tree(root / "train", {"x": 3, "y": 2})
    _tree(root / "val", {"x": 1, "y": 1})
    without = folder_source(root, val_fraction=0.2)
    assert without.test is None and without.split["test"] is None
    _tree(root / "test", {"y": 2})  # a class may be absent from test
    src = folder_source(root, val_fraction=0.2)
    assert src.test.labels.tolist() == [1, 1] and src.test.paths[0].endswith("test/y/y000.png")
    assert src.fingerprint == without.fingerprint  # test images never block a resume
    named = folder_source(root, val_fraction=0.2, test=Held(str(_tree(tmp_path / "held", {"x": 3}))))
    assert named.test.labels.tolist() == [0, 0, 0]  # data.test_path, named, wins over <path>/test/
    # the flat layout takes a test folder of its own; a "test" folder in it is a class
    flat = _tree(tmp_path / "flat", {"x": 4, "y": 4})
    elsewhere = _tree(tmp_path / "held_out", {"x": 1})
    src = folder_source(flat, val_fraction=0.25, test=Held(str(elsewhere)))
    assert len(src.test) == 1 and src.class_names == ["x", "y"]
    with pytest.raises(DataError, match="is a test class that training does not have"):
        folder_source(flat, val_fraction=0.25, test=Held(str(_tree(tmp_path / "odd", {"w": 1}))))
    with pytest.raises(DataError, match="data.test_path .* does not exist"):
        folder_source(flat, val_fraction=0.25, test=Held(str(tmp_path / "nowhere")))


def test_test_fraction_draws_a_test_split_from_the_flat_layout(tmp_path):
    flat = _tree(tmp_path / "flat", {"x": 20, "y": 10})
    before = folder_source(flat, val_fraction=0.2)
    src = folder_source(flat, val_fraction=0.2, test=Held(fraction=0.1))
    train, val, test = src.split["train"], src.split["val"], [os.path.relpath(p, flat) for p in src.split["test"]]
    assert sorted(train + val + test) == sorted(before.split["train"] + before.split["val"])
    assert not set(train) & set(test) and not set(val) & set(test)
    per_class = {c: [sum(f.startswith(c + "/") for f in part) for part in (train, val, test)] for c in "xy"}
    assert per_class == {"x": [14, 4, 2], "y": [7, 2, 1]}  # 70/20/10 of each class
    assert src.test.labels.tolist() == [0, 0, 1] and src.split["test_fraction"] == 0.1
    assert src.fingerprint != before.fingerprint  # the test files are outside it
    assert src.fingerprint == folder_source(_only(flat, train + val, tmp_path / "tv"), 0.2).fingerprint
    # no test_fraction: the split runs before it had (negative control for the slicing)
    ranked = {c: split_by_fraction([f for f in _files(flat, c)], 0.2) for c in "xy"}
    assert before.split["val"] == [r for c in "xy" for r, _, _ in ranked[c][1]]
    with pytest.raises(DataError, match="test_fraction=0.1 and data.test_path"):
        folder_source(flat, val_fraction=0.2, test=Held(str(flat), 0.1))
    given = tmp_path / "given"
    _tree(given / "train", {"x": 2, "y": 2})
    _tree(given / "val", {"x": 1, "y": 1})
    with pytest.raises(DataError, match=r"gives the split as train/ and val/: put the test images in .*given/test"):
        folder_source(given, val_fraction=0.2, test=Held(fraction=0.1))


def _files(root, cls):
    return sorted((p.relative_to(root).as_posix(), p.stat().st_size, int(p.stat().st_mtime))
                  for p in (root / cls).iterdir())


def _only(root, keep, dest):
    """A copy of `root` holding only the relative paths `keep`, times kept."""
    for rel in keep:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, dest / rel)
    return dest


SCAN = """
import os, sys
from app.data.sources.folder import Held, folder_source
from app.errors import DataError
if os.geteuid() == 0:  # root reads anything: the scan is made as `nobody`, the app imported before
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
try:
    folder_source(sys.argv[1], 0.2, test=Held(sys.argv[2] or None))
    print("no error", end="")
except DataError as error:
    print(error, end="")
except Exception as error:  # what the test should see instead
    print(f"{type(error).__name__}: {error}", end="")
"""


def _scanned_by_another_user(root: Path, test_path: Path | None = None) -> str:
    """folder_source(root)'s DataError message, as a user without root's right to read anything, in
    a fresh interpreter (a fork of this process, which holds TensorFlow's and JAX's threads, can deadlock)."""
    done = subprocess.run([sys.executable, "-c", SCAN, str(root), str(test_path or "")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_an_unreadable_folder_is_named_with_a_fix_that_reads(tmp_path):
    """chmod 000 on a sub-folder, a class folder or data.path itself: the message names it and
    asks for read access; never the run-directory advice ("writable by you")."""
    base = Path(tempfile.mkdtemp(prefix="unreadable-", dir="/tmp"))  # another user must reach it
    try:
        base.chmod(0o755)
        root = _tree(base / "data", {"a": 3, "b": 3})
        (root / "a" / "sub").mkdir()
        assert _scanned_by_another_user(root) == "no error"  # negative control: all readable
        for locked in (root / "a" / "sub", root / "b", root):
            locked.chmod(0o000)
            said = _scanned_by_another_user(root)
            locked.chmod(0o755)
            assert said.startswith(f"{locked} cannot be read (Permission denied)"), said
            assert f"chmod -R a+rX {locked}`" in said
            assert "writable" not in said and f"data.path {root}" in said
    finally:
        for folder in (base, *base.rglob("*")):
            folder.chmod(0o755)
        shutil.rmtree(base)


def test_a_file_reached_under_two_class_folders_is_refused_naming_both(tmp_path):
    root = _tree(tmp_path / "imgs", {"cats": 3, "dogs": 3})
    (root / "wolves").symlink_to(root / "dogs", target_is_directory=True)
    with pytest.raises(DataError, match=rf"one file \({root / 'wolves'} is a link to .*dogs\), under two class "
                                        rf"folders, {root / 'dogs'} and {root / 'wolves'}"):
        folder_source(root, 0.34)
    (root / "wolves").unlink()
    _image(root / "wolves" / "w.png", 9)
    os.link(root / "cats" / "cats000.png", root / "wolves" / "hard.png")
    with pytest.raises(DataError, match=r"one file \(a link or a hard link\), under two class folders"):
        folder_source(root, 0.34)
    (root / "wolves" / "hard.png").unlink()
    shutil.copy(root / "cats" / "cats000.png", root / "wolves" / "copy.png")  # negative control: a copy is its own
    assert folder_source(root, 0.34).class_names == ["cats", "dogs", "wolves"]
    given = _tree(tmp_path / "given", {"train/cats": 2, "train/dogs": 2, "val/dogs": 1})
    (given / "val" / "cats").mkdir()
    os.link(given / "train" / "cats" / "train" / "cats000.png", given / "val" / "cats" / "x.png")
    with pytest.raises(DataError, match=r"x.png and .*cats000.png are one file \(a link or a hard link\): it is in "
                                        r"both splits of class cats, train/ and val/: validation would score"):
        folder_source(given, 0.2)


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_one_file_twice_inside_one_class_folder_is_refused_naming_both_paths(tmp_path, link):
    root = _tree(tmp_path / "imgs", {"cats": 4, "dogs": 4})
    shutil.copy(root / "cats" / "cats000.png", root / "cats" / "copy.png")  # negative control: a copy is its own
    assert len(folder_source(root, 0.25).train) + len(folder_source(root, 0.25).val) == 9
    alias = root / "cats" / "sub" / "alias.png"
    alias.parent.mkdir()
    alias.hardlink_to(root / "cats" / "cats002.png") if link == "hard" else alias.symlink_to("../cats002.png")
    with pytest.raises(DataError, match=rf"{root}/cats/.*png and {root}/cats/.*png are one file .*: it is listed "
                                        rf"twice in class folder {root / 'cats'}, and its two names may land in "
                                        "different splits"):
        folder_source(root, 0.25)


def test_the_apps_own_outputs_in_data_path_are_no_class(tmp_path, monkeypatch, caplog):
    root = _tree(tmp_path / "imgs", {"cats": 3, "dogs": 3, "copy": 2, "outputs": 2})
    (root / "copy" / "manifest.json").write_text("{}")
    caplog.set_level("INFO", logger="app.data.sources.folder")
    monkeypatch.chdir(tmp_path)  # negative control: outputs/ of another working folder is a class
    assert folder_source(root, 0.34).class_names == ["cats", "dogs", "outputs"]
    assert "copy is a prepared copy (it holds manifest.json)" in caplog.text
    monkeypatch.chdir(root)  # data.path=. : Hydra writes its outputs/ here
    assert folder_source(".", 0.34).class_names == ["cats", "dogs"]
    assert "outputs is Hydra's output folder (data.path is the working folder)" in caplog.text


def test_a_report_run_or_sweep_folder_in_data_path_is_no_class(tmp_path, caplog):
    """Marked by what only the app writes there, at the time a run scans its data (summary.json is begun first)."""
    root = _tree(tmp_path / "imgs", {"cats": 3, "dogs": 3, "rep": 1, "runs/first": 1})
    assert folder_source(root, 0.34).class_names == ["cats", "dogs", "rep", "runs"]  # negative control: images
    (root / "rep" / "report.csv").write_text("run\n")  # a report's sheet of images sits beside it
    (root / "myrun").mkdir()
    (root / "myrun" / "summary.json").write_text("{}")
    (root / "sw" / "0").mkdir(parents=True)
    (root / "sw" / "multirun.yaml").write_text("{}")
    (root / "runs" / "first" / "runs/first000.png").unlink()
    (root / "runs" / "first" / "metrics.csv").write_text("epoch\n")
    caplog.set_level("INFO", logger="app.data.sources.folder")
    assert folder_source(root, 0.34).class_names == ["cats", "dogs"]
    for name, what in (("rep", "a report's folder (it holds report.csv)"), ("myrun", "a run's folder (it holds "
                       "summary.json)"), ("sw", "a sweep's folder (it holds multirun.yaml)"),
                       ("runs", "a folder of the app's outputs (first, ...)")):
        assert f"{root / name} is {what}, the app's own output: left out of the classes" in caplog.text
