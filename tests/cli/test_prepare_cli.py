"""`python -m app prepare` for real, on a tiny folder source with a broken file: spawned workers
without TensorFlow, shards a plain `tarfile` opens matching the index, upright images, the broken
file listed and left out, the same copy written to a bucket of a local S3 endpoint (and a
missing bucket refused), and a second run that writes nothing."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import s3fs
from docs_runner import spawn_one_process_for
from PIL import Image
from s3_endpoint import environment, new_bucket

from app.data.copies.shards import read_index, read_manifest, sample_key
from app.data.copies.storage import Store

ARGS = ["data=folder", "data.image_size=[16,16]", "queue.workers=2", "data.max_bad_fraction=0.5"]


def make_folder(root):
    """Two classes of six 60×40 JPEGs; one of them stored sideways with EXIF orientation 6
    (upright it is 40 wide, 60 high); and a broken file among class b's."""
    for c, cls in enumerate(("a", "b")):
        (root / cls).mkdir(parents=True)
        for i in range(6):
            pixels = np.full((40, 60, 3), (200 * c, 40 * i, 90), np.uint8)
            exif = Image.Exif()
            exif[0x0112] = 6 if (c, i) == (0, 0) else 1
            Image.fromarray(pixels).save(root / cls / f"{i}.jpg", quality=90, exif=exif)
    (root / "b" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg at all")


@pytest.mark.slow
def test_prepare_writes_shards_its_index_points_into_then_is_up_to_date(tmp_path, monkeypatch):
    make_folder(tmp_path / "images")
    fake = tmp_path / "fake"  # TensorFlow made unimportable: neither prepare nor its workers may need it
    (fake / "tensorflow").mkdir(parents=True)
    (fake / "tensorflow" / "__init__.py").write_text("raise ImportError('no TensorFlow in prepare')\n")
    env = {**os.environ, "PYTHONPATH": str(fake)}
    assert subprocess.run([sys.executable, "-c", "import tensorflow"], env=env).returncode != 0  # the fake works
    out = tmp_path / "copy"
    for name, value in environment().items():  # the local S3 endpoint, here and in the runs
        monkeypatch.setenv(name, value)
    env = {**env, **environment(), "TMPDIR": str(tmp_path / "tmp")}  # shards staged for the bucket: in tmp_path
    bucket = new_bucket(s3fs.S3FileSystem(skip_instance_cache=True))
    (tmp_path / "tmp").mkdir()

    def prepare(name: str, *runs: tuple[str, ...]) -> list[subprocess.CompletedProcess]:
        """Each run's arguments, `python -m app prepare` in one process (tests/docs_runner.py)."""
        return spawn_one_process_for(*(["prepare", *ARGS, f"data.path={tmp_path / 'images'}",
                                        f"hydra.run.dir={tmp_path / name / str(n)}", *extra]
                                       for n, extra in enumerate(runs)), cwd=tmp_path, env=env)

    # negative controls: data.on_bad_sample=raise (the default) stops at the broken file; a bucket
    # that does not exist is refused before any encoding work (no progress bar)
    refused, no_bucket = prepare("refused", (f"prepare.out={out}",), (f"prepare.out=s3://no-such-{bucket}/copy",))
    assert refused.returncode == 1 and "broken.jpg" in refused.stderr and "data.on_bad_sample=skip" in refused.stderr
    assert not (out / "manifest.json").exists()
    assert no_bucket.returncode == 1 and f"s3://no-such-{bucket}/copy does not exist" in no_bucket.stderr
    assert "img/s" not in no_bucket.stderr and "img/s" in refused.stderr
    done, remote = prepare("first", ("data.on_bad_sample=skip", f"prepare.out={out}"),
                           ("data.on_bad_sample=skip", f"prepare.out=s3://{bucket}/copy"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert remote.returncode == 0, remote.stderr[-3000:]
    assert "prepared 13 files (1 bad, left out)" in done.stdout and "pays back" in done.stdout
    assert "prepared 13 files (1 bad, left out)" in remote.stdout and "pays back" in remote.stdout
    bucket_copy = Store.at(f"s3://{bucket}/copy")
    for name in ("manifest.json", "index-train.npy", "index-val.npy", "bad_samples.txt", "train-00000.tar"):
        assert bucket_copy.read_bytes(name) == (out / name).read_bytes(), name  # the same copy, in the bucket
    assert not [p for p in (tmp_path / "tmp").rglob("*") if p.is_file()]  # no staging file left
    manifest = read_manifest(out)
    assert manifest.class_names == ["a", "b"] and manifest.format == "jpeg" and manifest.bad_samples == 1
    bad = (out / "bad_samples.txt").read_text().splitlines()
    assert len(bad) == 1 and bad[0].split("\t")[2].endswith("broken.jpg")
    seen = 0
    for split, record in manifest.splits.items():
        index = read_index(out, split)
        assert len(index) == record.count
        for i, row in enumerate(index):
            with tarfile.open(out / record.shards[row["shard"]]) as tar:
                key = sample_key(split, i)  # its place in the prepared split: on past the bad one
                image = tar.getmember(f"{key}.jpg")
                assert (image.offset_data, image.size) == (row["offset"], row["length"])
                assert int(tar.extractfile(f"{key}.cls").read()) == row["label"]
                meta = json.loads(tar.extractfile(f"{key}.json").read())
                stored = Image.open(io.BytesIO(tar.extractfile(image).read()))
            assert stored.size == (row["width"], row["height"]) and meta["label"] == row["label"]
            assert f"/{'ab'[row['label']]}/" in meta["path"]  # the label is the file's class folder
            assert min(stored.size) == manifest.short_side < 40  # brought down, the aspect kept
            upright = meta["path"].endswith("a/0.jpg")
            assert (stored.height > stored.width) == upright and meta["size"] == ([60, 40] if upright else [40, 60])
            seen += 1
    assert seen == 12 and manifest.splits["train"].count + manifest.splits["val"].count == 12
    times = {p.name: p.stat().st_mtime_ns for p in out.rglob("*")}
    again, remote_again = prepare("second", ("data.on_bad_sample=skip", f"prepare.out={out}"),
                                  ("data.on_bad_sample=skip", f"prepare.out=s3://{bucket}/copy"))
    assert again.returncode == 0 and "up to date" in again.stdout
    assert remote_again.returncode == 0 and f"s3://{bucket}/copy is up to date" in remote_again.stdout
    assert {p.name: p.stat().st_mtime_ns for p in out.rglob("*")} == times  # nothing rewritten
