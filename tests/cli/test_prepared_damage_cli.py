"""A prepared copy damaged after `python -m app prepare` wrote it, met through the CLI: its class
names swapped or a count edited in manifest.json, index-train.npy deleted, a shard cut short,
one byte flipped inside a member's JPEG data; and a copy of the format before checksums. Each is
refused (or, the flipped byte, a bad sample under data.on_bad_sample) naming the file, with the
prepare that mends it; the test runs that prepare as the message gives it, and training then
runs on the mended copy, which is byte for byte the copy first written. A test's commands run in one
process (tests/docs_runner.py's OneProcess): TensorFlow loads once."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
from docs_runner import OneProcess
from PIL import Image
from prepared_copies import flip_byte, write_as_format_1

TESTS = Path(__file__).resolve().parents[1]
# this checkout's app first: the CLI and its workers must import it, not an installed one
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
CLASSES = ["cat", "dog", "eel"]
# an epoch of full batches only: 15 training samples (prepared asserts it) in three batches, each read
TRAIN = ["train", "data=prepared", "data.image_size=[16,16]", "data.batch_size=5", "model.widths=[8]",
         "trainer.epochs=1", "queue.workers=1"]
ADVISED = re.compile(r"`(python -m app prepare [^`]*)`")


def make_folder(root: Path) -> Path:
    """Three classes of six small JPEGs, each class its own colour."""
    for c, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(np.full((24, 32, 3), (110 * c, 30 * i, 60), np.uint8)).save(root / name / f"{i}.jpg")
    return root


def prepared(tmp_path: Path, app: OneProcess) -> Path:
    """The copy `prepare` writes of make_folder's images, at auto's short side for 16² out."""
    images, out = make_folder(tmp_path / "images"), tmp_path / "copy"
    done = app("prepare", "data=folder", f"data.path={images}", "data.image_size=[16,16]", "queue.workers=0",
               f"prepare.out={out}", f"hydra.run.dir={tmp_path / 'prepared'}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "manifest.json").read_text())["splits"]["train"]["count"] == 15
    return out


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def advised(printed: str, copy: Path, run: str) -> list[str]:
    """The prepare a message advises, as `python -m app` takes it (`prepare ...`, its run folder
    added), once it is seen to name the copy."""
    command = shlex.split(ADVISED.search(printed).group(1))
    assert command[:3] == ["python", "-m", "app"] and f"prepare.out={copy}" in command, command
    return [*command[3:], f"hydra.run.dir={run}"]


def edit_manifest(copy: Path, edit) -> None:
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2))


@pytest.mark.slow
def test_a_damaged_copy_is_refused_naming_the_file_and_the_advised_prepare_mends_it(tmp_path):
    with OneProcess(env=ENV) as app:
        refused_then_mended(tmp_path, app)


def refused_then_mended(tmp_path: Path, app: OneProcess) -> None:
    copy = prepared(tmp_path, app)
    written = tree(copy)
    damaged = {kind: shutil.copytree(copy, tmp_path / kind) for kind in ("labels", "count", "index", "shard")}
    edit_manifest(damaged["labels"], lambda m: m.update(class_names=["dog", "cat", "eel"]))
    edit_manifest(damaged["count"], lambda m: m["splits"]["train"].update(count=m["splits"]["train"]["count"] - 1))
    (damaged["index"] / "index-train.npy").unlink()
    with open(damaged["shard"] / "train-00000.tar", "r+b") as shard:
        shard.truncate(len(written["train-00000.tar"]) // 2)

    whole, *refused = (app(*TRAIN, f"data.path={path}", f"hydra.run.dir=run-{kind}", cwd=tmp_path)
                       for kind, path in [("whole", copy), *damaged.items()])
    assert whole.returncode == 0, whole.stderr[-3000:]  # negative control: the copy as written trains
    named = {"labels": f"{damaged['labels']}/manifest.json does not match its checksum",
             "count": f"{damaged['count']}/manifest.json does not match its checksum",
             "index": f"{damaged['index']}/index-train.npy cannot be read",
             "shard": f"{damaged['shard']}/train-00000.tar is {len(written['train-00000.tar']) // 2} bytes where"}
    for kind, result in zip(damaged, refused, strict=True):
        assert result.returncode == 1 and named[kind] in result.stderr, (kind, result.stderr[-3000:])
        assert not (tmp_path / f"run-{kind}" / "metrics.csv").exists()  # refused before any training

    mends = [advised(result.stderr, damaged[kind], f"mend-{kind}") for kind, result in zip(damaged, refused,
                                                                                             strict=True)]
    *mended, again = (app(*argv, cwd=tmp_path) for argv in
                      [*mends, advised(refused[0].stderr, damaged["labels"], "again")])
    for kind, result in zip(damaged, mended, strict=True):
        assert result.returncode == 0 and "is not whole" in result.stderr, (kind, result.stderr[-3000:])
        assert tree(damaged[kind]) == written, kind  # what was damaged written again, the rest kept
    assert again.returncode == 0 and "is up to date" in again.stdout  # a whole copy: nothing to mend

    trained = [app(*TRAIN, f"data.path={damaged[kind]}", f"hydra.run.dir=mended-{kind}", cwd=tmp_path)
               for kind in damaged]
    for kind, result in zip(damaged, trained, strict=True):
        assert result.returncode == 0, (kind, result.stderr[-3000:])
        assert json.loads((tmp_path / f"mended-{kind}" / "split.json").read_text())["class_names"] == CLASSES


@pytest.mark.slow
@pytest.mark.exhaustive
def test_a_flipped_byte_is_a_bad_sample_named_by_shard_and_member_and_an_old_copy_reads_unchecked(tmp_path):
    """Covered in `make test` by: a damaged copy refused and mended through the CLI (the test above)
    and a flipped byte failing its CRC (tests/data/test_prepared.py)."""
    with OneProcess(env=ENV) as app:
        flipped_then_mended(tmp_path, app)


def flipped_then_mended(tmp_path: Path, app: OneProcess) -> None:
    copy = prepared(tmp_path, app)
    written = tree(copy)
    old = shutil.copytree(copy, tmp_path / "old")
    write_as_format_1(old)
    where, _ = flip_byte(copy, "train", 2), flip_byte(old, "train", 2)

    stopped, skipped, unchecked = (app(*argv, cwd=tmp_path) for argv in (
        [*TRAIN, f"data.path={copy}", "hydra.run.dir=run-raise"],
        [*TRAIN, f"data.path={copy}", "data.on_bad_sample=skip", "data.max_bad_fraction=0.2", "hydra.run.dir=run-skip"],
        [*TRAIN, f"data.path={old}", "hydra.run.dir=run-old"]))
    assert stopped.returncode == 1 and f"({where}) could not be loaded: its bytes fail their CRC32" in stopped.stderr
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    listed = (tmp_path / "run-skip" / "bad_samples.txt").read_text()
    assert where in listed and "CRC32" in listed and len(listed.splitlines()) == 1
    assert unchecked.returncode == 0, unchecked.stderr[-3000:]  # negative control: no checksum, no check
    lines = [line for line in unchecked.stderr.splitlines() if "unchecked" in line]
    assert len(lines) == 1 and f"{old}/manifest.json is format version 1" in lines[0]
    assert "CRC32" not in unchecked.stderr and not (tmp_path / "run-old" / "bad_samples.txt").exists()

    # the advice: delete the damaged shard, then run the prepare the message gives
    (copy / where.split(" member ")[0]).unlink()
    *mended, trained, upgraded = (app(*argv, cwd=tmp_path) for argv in (
        advised(stopped.stderr, copy, "mend"), advised(lines[0], old, "upgrade"),
        [*TRAIN, f"data.path={copy}", "hydra.run.dir=run-mended"],
        [*TRAIN, f"data.path={old}", "hydra.run.dir=run-upgraded"]))
    assert all(result.returncode == 0 for result in mended), [r.stderr[-3000:] for r in mended]
    assert tree(copy) == written and tree(old) == written  # both as prepare writes them now, checksums and all
    assert trained.returncode == 0 and "CRC32" not in trained.stderr, trained.stderr[-3000:]
    assert upgraded.returncode == 0 and "unchecked" not in upgraded.stderr, upgraded.stderr[-3000:]
