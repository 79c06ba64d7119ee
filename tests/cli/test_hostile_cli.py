"""What a hostile test of the CLI found, through the real CLI: a run directory whose
path has a space and a non-ASCII character, a lock held by another process, directories of the
same second taken already, a predict over unreadable files, a full disk. The commands on the one run
share a process kept for the module (tests/docs_runner.py's OneProcess): TensorFlow loads once."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from docs_runner import OneProcess
from PIL import Image

TINY = ["data.num_images=24", "data.source_size=96", "data.num_classes=3", "data.image_size=[32,32]",
        "data.batch_size=4", "model.widths=[8]", "trainer.epochs=1", "queue.workers=1"]


def epochs(run: Path) -> list[str]:
    return [r["epoch"] for r in csv.DictReader((run / "metrics.csv").open())]


@pytest.fixture(scope="module")
def app():
    """`python -m app <args>` in `cwd`, each command on the run in one process."""
    with OneProcess() as one_process:
        yield one_process


@pytest.fixture(scope="module")
def run(tmp_path_factory, app) -> Path:
    """One training run, from a folder named with a space and a non-ASCII character, started
    while every directory name of the next 90 seconds is taken already."""
    root = tmp_path_factory.mktemp("hostile") / "my runs ü"
    taken = {time.strftime("%Y-%m-%d/%H-%M-%S", time.localtime(time.time() + s)) for s in range(90)}
    for name in taken:
        (root / "outputs" / name).mkdir(parents=True)
        (root / "outputs" / name / "summary.json").write_text('{"status": "another run"}')
    result = app("train", *TINY, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    (checkpoints,) = root.glob("outputs/*/*/checkpoints")
    made = checkpoints.parent
    assert made.relative_to(root / "outputs").as_posix() not in taken and made.name.endswith("-1")
    for name in taken:  # every other run's directory untouched
        assert os.listdir(root / "outputs" / name) == ["summary.json"]
    return made


def test_claimed_names_are_unique_under_a_race(tmp_path):
    """The mechanism: many claims of one name at once, each gets its own directory."""
    from concurrent.futures import ThreadPoolExecutor

    from app.runs.rundir import claim_dir

    with ThreadPoolExecutor(8) as pool:
        claimed = list(pool.map(lambda _: claim_dir(tmp_path / "12-00-00"), range(16)))
    assert len(set(claimed)) == 16 and all(p.is_dir() for p in claimed)


@pytest.mark.slow
def test_evaluate_and_predict_on_a_run_whose_path_has_a_space(run, app):
    """Evaluate and predict take such paths; predict lists each unreadable
    file with its error and no numbers, goes on, and exits 0."""
    images = run.parent / "to predict é"
    (images / "sub").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("a.png", "sub/b.png"):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(images / name)
    good = (images / "a.png").read_bytes()
    (images / "text.jpg").write_text("this is not an image")
    (images / "empty.jpg").write_bytes(b"")
    jpeg = images / "sub" / "truncated.jpg"
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(jpeg)
    jpeg.write_bytes(jpeg.read_bytes()[:200])
    (images / "sub" / "loop.jpg").symlink_to(images / "sub" / "loop.jpg")
    only_bad = run.parent / "all bad"
    only_bad.mkdir()
    (only_bad / "x.jpg").write_bytes(b"")
    evaluated = app("evaluate", f"resume={run}", cwd=run.parent)
    result = app("predict", f"resume={run}", f"input={images}", "queue.workers=2", cwd=run.parent)
    failed = app("predict", f"resume={run}", f"input={only_bad}", cwd=run.parent)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert list(run.glob("evaluate/*/evaluation.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "4 of 6 files could not be read" in result.stdout
    # the one of the folder with readable files (the all-bad folder's predict writes its own)
    (out,) = [csv_file for csv_file in run.glob("predict/*/predictions.csv") if "a.png" in csv_file.read_text()]
    rows = {Path(r["path"]).name: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert set(rows) == {"a.png", "b.png", "text.jpg", "empty.jpg", "truncated.jpg", "loop.jpg"}
    assert rows["loop.jpg"]["error"] == "Too many levels of symbolic links"
    for name in ("text.jpg", "empty.jpg", "truncated.jpg", "loop.jpg"):
        row = rows[name]
        assert row["error"] and row["class"] == "" and all(v == "" for k, v in row.items()
                                                         if k not in ("path", "error"))
    assert rows["empty.jpg"]["error"] == "empty file"
    for name in ("a.png", "b.png"):  # negative control: the readable ones have numbers and no error
        assert rows[name]["error"] == "" and rows[name]["class"]
        assert sum(float(v) for k, v in rows[name].items() if k not in ("path", "class", "error")) == \
            pytest.approx(1, abs=1e-4)
    assert (images / "a.png").read_bytes() == good

    assert failed.returncode == 1 and "none of the 1 files" in failed.stderr and "Traceback" not in failed.stderr


@pytest.mark.slow
def test_a_locked_run_is_refused_and_a_killed_holder_leaves_no_lock(run, app):
    """Two `train resume=` of one run both ran. The second is refused, naming the
    PID; a holder killed by SIGKILL leaves nothing stale; and resume takes the path with a space."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from app.runs.rundir import hold_lock; "
         "hold_lock(sys.argv[1], 'a test'); print('held', flush=True); sys.stdin.read()", str(run)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = (run / "metrics.csv").read_text()
        refused = app("train", f"resume={run}", "trainer.epochs=2", cwd=run.parent)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert f"process {holder.pid} (a test) holds its lock" in refused.stderr and str(run) in refused.stderr
        assert (run / "metrics.csv").read_text() == before
    finally:
        holder.kill()
        holder.wait()
    resumed = app("train", f"resume={run}", "trainer.epochs=2", cwd=run.parent)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert epochs(run) == ["1", "2"]


@pytest.mark.slow
def test_a_full_disk_marks_the_run_failed_and_leaves_no_half_file(tmp_path):
    """A full disk left status `running` and an empty .summary.json.tmp. The run
    directory is a 160 KiB tmpfs, in a mount namespace of our own."""
    if not shutil.which("unshare"):
        pytest.skip("needs unshare (util-linux) for a small tmpfs")
    full = tmp_path / "full"
    full.mkdir()
    script = (f'mount -t tmpfs -o size=160k none "{full}" && "{sys.executable}" -m app train '
              + " ".join(TINY) + f' hydra.run.dir="{full}/run"')
    result = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                             script + f'; status=$?; cp -r "{full}/run" "{tmp_path}/seen"; exit $status'],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    if "mount:" in result.stderr and not (tmp_path / "seen").exists():
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()[:200]}")
    assert result.returncode == 1
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("error: no space left on the device holding") and "free some space" in message
    seen = tmp_path / "seen"
    assert json.loads((seen / "summary.json").read_text())["status"] == "failed"
    left = [p.name for p in seen.rglob("*") if ".tmp" in p.name]
    assert not left, left
