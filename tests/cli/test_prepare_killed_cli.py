"""`python -m app prepare` SIGKILLed at seeded moments (a shard half-written, a shard just
renamed, the last one renamed; and what a kill while the index or manifest is written leaves,
placed by hand): what is left is never half a shard under a shard's name, the
manifest is absent or whole, data=prepared refuses the unfinished copy, and prepare run again
finishes a copy byte-identical to one prepared without a stop. The finished copy opens with
WebDataset's own reader as data=prepared reads it."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from prepared_copies import write_copy
from shard_checks import (
    SHARD,
    assert_complete_json,
    assert_shard_holds,
    assert_webdataset_reads_what_the_index_says,
    prepared_data,
    tar_members,
)

from app.data.copies.shards import MANIFEST, read_index, read_manifest, sample_key
from app.data.sources.chosen import load_or_generate_source
from app.errors import DataError
from app.prepare.plan import JOURNAL

# noise photos stored at full size: about 10 a 1 MiB shard, so three train shards and a val one,
# each some tens of ms of decoding and encoding (long enough to be killed in the middle of)
ARGS = ["data=folder", "prepare.short_side=full", "prepare.shard_mb=1", "queue.workers=0", "data.val_fraction=0.2"]
TEMPORARY = re.compile(r"^\..*\.\d+\.tmp$")  # app/io.py's atomic_write writes beside the name, hidden


def journal(out: Path) -> Path:
    """The copy's plan and shard records (app/prepare/plan.py)."""
    return Path(out) / JOURNAL


def make_noise_folder(root: Path) -> Path:
    """Two classes of fifteen 256×256 JPEGs of noise (they compress badly: large stored samples)."""
    rng = np.random.default_rng(0)
    for label, cls in enumerate("ab"):
        (root / cls).mkdir(parents=True)
        for i in range(15):
            pixels = rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)
            pixels[..., label] //= 2
            Image.fromarray(pixels).save(root / cls / f"{i}.jpg", quality=90)
    return root


def prepare_command(images: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "app", "prepare", *ARGS, f"data.path={images}", f"prepare.out={out}",
            f"hydra.run.dir={out.parent / ('logs-' + out.name)}", *extra]


def start_and_kill_prepare_when(argv: list[str], out: Path, pattern: re.Pattern, delay: float) -> tuple[int, str]:
    """Start `argv`; SIGKILL it `delay` s after a file whose name matches `pattern` shows up in
    `out` (polled every half millisecond: a shard's temporary lives some tens of ms). Returns (its
    exit status, the name seen)."""
    process = subprocess.Popen(argv, cwd=out.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline, seen = time.monotonic() + 120, None
    while seen is None:
        assert process.poll() is None, f"prepare ended before {pattern.pattern}: {process.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"no {pattern.pattern} in {out} after 120 s"
        names = os.listdir(out) if out.is_dir() else []
        seen = next((name for name in names if pattern.match(name)), None)
        time.sleep(0.0005 if seen is None else delay)  # the seeded moment after the event, not a wait for anything
    process.kill()
    process.communicate()
    return process.returncode, seen


def assert_a_reader_sees_no_half_file(out: Path) -> set[str]:
    """What a kill left in `out`, as any reader would see it; returns the temporaries left there."""
    fmt = json.loads((journal(out) / "plan.json").read_text())["key"]["format"]
    for shard in (path for path in out.iterdir() if SHARD.match(path.name)):
        tar_members(shard)  # whole, to its end-of-archive blocks
        record = journal(out) / f"{shard.name}.json"
        if record.exists():  # a shard renamed but killed before its record was written has none yet
            written = assert_complete_json(record)
            split, ranges = shard.name.split("-")[0], [(row[0], row[1]) for row in written["rows"]]
            keys = [sample_key(split, written["start"] + n) for n in range(len(ranges))]  # numbered on
            assert_shard_holds(shard, keys, ranges, fmt)
    if (out / MANIFEST).exists():
        manifest = read_manifest(out)  # whole JSON, or this fails
        for split, record in manifest.splits.items():
            index = read_index(out, split)
            assert len(index) == record.count
            for number, name in enumerate(record.shards):
                rows = np.flatnonzero(index["shard"] == number)
                ranges = list(zip(index["offset"][rows].tolist(), index["length"][rows].tolist(), strict=True))
                assert_shard_holds(out / name, [sample_key(split, i) for i in rows], ranges, fmt)
    else:
        with pytest.raises(DataError, match=r"manifest.json is missing: .* did not finish \(run it again"):
            load_or_generate_source(prepared_data(out))
    return {name for name in os.listdir(out) if TEMPORARY.match(name)}


def plant_what_a_kill_in_the_last_writes_leaves(out: Path, finished: Path) -> set[str]:
    """The temporaries of a prepare killed while writing the index, the manifest or a shard's record:
    microseconds each, too short to stop a process in by polling, so placed by hand (half of
    what a finished copy holds), as another process's. Returns their names in `out`."""
    planted = {out / ".index-train.npy.4242.tmp": finished / "index-train.npy",
               out / ".manifest.json.4242.tmp": finished / MANIFEST,
               journal(out) / ".train-00000.tar.json.4242.tmp": journal(finished) / "train-00000.tar.json"}
    for temporary, whole in planted.items():
        data = whole.read_bytes()
        temporary.write_bytes(data[:len(data) // 2])
    assert_a_reader_sees_no_half_file(out)  # a half manifest beside its name: still no manifest
    return {path.name for path in planted if path.parent == out}


def tree(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.mark.slow
def test_prepare_killed_anywhere_leaves_no_half_shard_and_finishes_the_same_copy(tmp_path):
    images = make_noise_folder(tmp_path / "images")
    out = tmp_path / "copy"
    # the uninterrupted copy, and another seed's (the negative control), side by side
    reference = [subprocess.Popen(prepare_command(images, tmp_path / name, *extra), cwd=tmp_path, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for name, extra in (("reference", ()), ("reseeded", ("seed=1",)))]
    for process in reference:
        assert process.wait(timeout=300) == 0, process.stderr.read()[-3000:]
    shards = sorted(name for name in os.listdir(tmp_path / "reference") if SHARD.match(name))
    train = [name for name in shards if name.startswith("train")]
    assert len(train) >= 3 and "val-00000.tar" in shards, shards  # several shards to stop between

    rng = random.Random(7)
    first, second = sorted(rng.sample(range(len(train)), 2))
    last = json.loads((journal(tmp_path / "reference") / "plan.json").read_text())["splits"]["val"]["shards"][-1]
    kills = [  # (what shows up, then SIGKILL after a seeded delay)
        re.compile(rf"^\.{re.escape(train[first])}\.\d+\.tmp$"),  # a shard begun: half of it in its temporary
        re.compile(rf"^{re.escape(train[second])}$"),  # a shard just renamed, its record perhaps not yet written
        re.compile(rf"^{re.escape(last)}$"),  # the last shard renamed: its record, the index, the manifest next
    ]
    partial = set()
    for number, pattern in enumerate(kills):
        if number == 2:
            partial |= plant_what_a_kill_in_the_last_writes_leaves(out, tmp_path / "reference")
        status, seen = start_and_kill_prepare_when(prepare_command(images, out), out, pattern, rng.uniform(0, 0.001))
        assert status == -9 or (number == len(kills) - 1 and status == 0), (seen, status)
        partial |= assert_a_reader_sees_no_half_file(out)
    assert any(SHARD.match(name[1:].rsplit(".", 2)[0]) for name in partial), partial  # a shard killed half-written

    done = subprocess.run(prepare_command(images, out), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    finished, uninterrupted = tree(out), tree(tmp_path / "reference")
    assert not [name for name in finished if TEMPORARY.match(Path(name).name)]  # the stale temporaries gone
    assert finished.keys() == uninterrupted.keys()
    assert [name for name in finished if finished[name] != uninterrupted[name]] == []
    reseeded = tree(tmp_path / "reseeded")  # negative control: another seed, other shards
    assert reseeded["train-00000.tar"] != finished["train-00000.tar"] and reseeded != finished
    assert assert_webdataset_reads_what_the_index_says(out) == 30


def test_the_checks_catch_a_shard_cut_between_members_and_members_not_where_the_rows_say(tmp_path):
    """The checks above, against what they must catch (a copy written by tests/prepared_copies.py)."""
    root = write_copy(tmp_path / "copy", image_format="raw", counts={"train": 6, "val": 3})
    index = read_index(root, "train")
    rows = np.flatnonzero(index["shard"] == 0)
    keys, ranges = [sample_key("train", i) for i in rows], [(int(r["offset"]), int(r["length"])) for r in index[rows]]
    shard = root / "train-00000.tar"
    assert_shard_holds(shard, keys, ranges, "raw")  # whole and as the index says
    with pytest.raises(AssertionError):
        assert_shard_holds(shard, keys, ranges[::-1], "raw")  # the rows of other members
    with pytest.raises(AssertionError):
        assert_shard_holds(shard, keys[1:] + ["train-000000099"], ranges, "raw")  # other keys
    with tarfile.open(shard) as tar:
        first_sample_ends = max(m.offset_data + -(-m.size // 512) * 512 for m in tar.getmembers()[:3])
    with open(shard, "r+b") as f:
        f.truncate(first_sample_ends)  # a writer stopped after its first sample, before the end blocks
    with tarfile.open(shard) as tar:
        assert len(tar.getmembers()) == 3  # tarfile alone takes the cut file for a shorter whole one
    with pytest.raises(AssertionError, match="ends without its end-of-archive"):
        tar_members(shard)


def semaphores() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("sem.mp-")}


def orphaned(names: set[str]) -> set[str]:
    """Those of `names` no live process maps: what a killed pool left, not what the tests beside this one hold now."""
    mapped = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            mapped |= {int(line.split()[4]) for line in maps.read_text().splitlines() if " /dev/shm/sem." in line}
    found = set()
    for name in names:
        with contextlib.suppress(OSError):
            found |= {name} if os.stat(f"/dev/shm/{name}").st_ino not in mapped else set()
    return found


@pytest.mark.slow
def test_a_prepare_killed_with_its_process_group_leaves_no_semaphore_after_the_next(tmp_path):
    images, out, before = make_noise_folder(tmp_path / "images"), tmp_path / "copy", semaphores()
    argv = [*prepare_command(images, out), "queue.workers=1"]  # a spawned pool: its queues' semaphores
    process = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    deadline = time.monotonic() + 120
    while not any(SHARD.match(name) for name in (os.listdir(out) if out.is_dir() else [])):  # the pool at work
        assert process.poll() is None, process.stderr.read()[-2000:]
        assert time.monotonic() < deadline, "no shard after 120 s"
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGKILL)  # its workers and resource tracker too, as a terminal's kill -9 -<pgid>
    process.communicate()
    assert orphaned(semaphores() - before)  # negative control: the kill left the pool's semaphores behind
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert orphaned(semaphores() - before) == set()
