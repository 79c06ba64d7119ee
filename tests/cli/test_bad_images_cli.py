"""Bad images through the real CLI, as a user meets them: a data folder holding a decompression
bomb, a zero-byte file, a text file named .jpg, a truncated JPEG and a link in a loop; train,
evaluate, preview and plan each follow the bad-sample policy and name the file, never a traceback.
The tests' commands run one after another in one process (tests/docs_runner.py): TensorFlow loads once."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from docs_runner import spawn_one_process_for
from PIL import Image
from test_train_cli import check_run_dir

TINY = ["data=folder", "data.image_size=[32,32]", "data.batch_size=4", "model.widths=[8]", "trainer.epochs=1",
        "queue.workers=1", "logger=csv"]
BAD = {"bomb.jpg", "empty.jpg", "text.jpg", "truncated.jpg", "loop.jpg"}


def _bomb() -> bytes:
    """630 bytes of JPEG whose frame header declares 30000×30000."""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buffer, "JPEG")
    raw = bytearray(buffer.getvalue())
    sof = raw.index(b"\xff\xc0")
    raw[sof + 5:sof + 9] = (30000).to_bytes(2, "big") * 2
    return bytes(raw)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """train/, val/ and test/ of two classes; the bad files in train/ and one empty file in test/."""
    root = tmp_path_factory.mktemp("bad images") / "data"
    rng = np.random.default_rng(0)
    for split, n in (("train", 8), ("val", 3), ("test", 4)):
        for label, cls in enumerate("ab"):
            (root / split / cls).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)
                pixels[..., label] = 255
                Image.fromarray(pixels).save(root / split / cls / f"{i}.jpg")
    (root / "train/a/bomb.jpg").write_bytes(_bomb())
    (root / "train/a/empty.jpg").write_bytes(b"")
    (root / "train/b/text.jpg").write_text("not an image\n")
    (root / "train/b/truncated.jpg").write_bytes((root / "train/b/0.jpg").read_bytes()[:300])
    (root / "train/b/loop.jpg").symlink_to(root / "train/b/loop.jpg")
    (root / "test/a/empty.jpg").write_bytes(b"")
    return root


@pytest.fixture(scope="module")
def ran(data) -> SimpleNamespace:
    """Each test's commands, in one process; `nothing` a folder whose every file is a dangling link."""
    root, run, nothing = data.parent, data.parent / "skip run", data.parent / "nothing readable"
    for split in ("train", "val"):
        for cls in "ab":
            (nothing / split / cls).mkdir(parents=True)
            (nothing / split / cls / "gone.jpg").symlink_to(nothing / "gone.jpg")
    skip = ["data.on_bad_sample=skip"]
    commands = {
        "skipped": ["train", *TINY, f"data.path={data}", *skip, "data.max_bad_fraction=0.4", f"hydra.run.dir={run}"],
        "evaluated": ["evaluate", f"resume={run}", "split=test"],
        "limited": ["predict", f"resume={run}", f"input={data / 'test'}", "data.max_image_pixels=100"],
        "raised": ["train", *TINY, f"data.path={data}", f"hydra.run.dir={root / 'raise run'}"],
        "over": ["train", *TINY, f"data.path={data}", *skip, "data.max_bad_fraction=0.1",
                 f"hydra.run.dir={root / 'over run'}"],
        "shown": ["preview", *TINY, f"data.path={data}", "preview.images=16", "preview.augmentations=1", *skip,
                  "hydra.run.dir=preview"],
        "empty": ["preview", *TINY, f"data.path={nothing}", *skip, "hydra.run.dir=p3"],
        "refused": ["preview", *TINY, f"data.path={data}", "preview.images=16", "hydra.run.dir=p2"],
        "planned": ["plan", *TINY, f"data.path={data}", "data.max_image_pixels=null", "hydra.run.dir=plan"]}
    done = spawn_one_process_for(*commands.values(), cwd=root)
    return SimpleNamespace(run=run, **dict(zip(commands, done, strict=True)))


def _clean(result: subprocess.CompletedProcess) -> None:
    said = result.stdout + result.stderr
    assert "Traceback" not in said and "unexpected" not in said and "a bug" not in said, said[-3000:]


@pytest.mark.slow
def test_skip_trains_lists_every_bad_file_and_evaluate_leaves_out_what_it_cannot_read(data, ran):
    run, result, evaluated, limited = ran.run, ran.skipped, ran.evaluated, ran.limited
    assert result.returncode == 0, result.stderr[-3000:]
    _clean(result)
    listed = [line.split("\t") for line in (run / "bad_samples.txt").read_text().splitlines()]
    assert {Path(where).name for _, _, where, _ in listed} == BAD and len(listed) == len(BAD)
    reasons = {Path(where).name: why for _, _, where, why in listed}
    assert "30000×30000" in reasons["bomb.jpg"] and reasons["empty.jpg"] == "empty file"
    assert reasons["loop.jpg"] == "Too many levels of symbolic links"
    check_run_dir(run, epochs=1)

    # evaluate never stands another file in: the unreadable test file is left out and named
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    _clean(evaluated)
    assert "1 of 9 test files could not be read and were left out" in evaluated.stdout
    (report,) = run.glob("evaluate/*/evaluation.json")
    result = json.loads(report.read_text())
    assert result["samples"] == 8 and sum(map(sum, result["confusion"])) == 8  # the readable ones, each once
    assert result["unreadable"] == [{"path": str(data / "test/a/empty.jpg"), "error": "empty file"}]
    assert result["per_class"]["a"]["support"] == 4 and result["per_class"]["b"]["support"] == 4

    # the advice a too-large image gets (raise data.max_image_pixels) is taken by predict on a run
    assert limited.returncode == 1 and "none of the 9 files under" in limited.stderr
    assert "above data.max_image_pixels=100" in limited.stderr and "raise data.max_image_pixels" in limited.stderr
    _clean(limited)


@pytest.mark.slow
def test_raise_stops_with_one_paragraph_naming_the_file(data, ran):
    result, over = ran.raised, ran.over
    assert result.returncode == 1
    _clean(result)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sample ") and any(f"{data}/train/" in last and name in last for name in BAD)
    assert "set data.on_bad_sample=skip" in last  # the advice the test above follows
    assert json.loads((data.parent / "raise run" / "summary.json").read_text())["status"] == "failed"

    assert over.returncode == 1 and "above data.max_bad_fraction=0.1" in over.stderr
    _clean(over)


@pytest.mark.slow
def test_preview_follows_the_policy(data, ran):
    shown, empty, refused = ran.shown, ran.empty, ran.refused
    assert shown.returncode == 0, shown.stderr[-3000:]
    _clean(shown)
    assert (data.parent / "preview/preview.png").is_file()
    said = (shown.stdout + shown.stderr).splitlines()
    left_out = [line for line in said if "left out of the preview: sample" in line]
    assert {name for name in BAD for line in left_out if f"/{name})" in line} == BAD  # all 21 tried, 16 shown
    assert empty.returncode == 1 and "none of the 2 samples of the train split could be read" in empty.stderr
    _clean(empty)
    assert refused.returncode == 1
    _clean(refused)
    last = refused.stderr.strip().splitlines()[-1]
    assert any(name in last for name in BAD) and " — " not in last and "data.on_bad_sample=skip" in last


@pytest.mark.slow
def test_plan_reads_headers_by_the_loaders_rules(ran):
    """With the default limit, train's own plan passed over the bomb (above); without one, too."""
    result = ran.planned
    assert result.returncode == 0, result.stderr[-3000:]
    _clean(result)
    assert "host memory (predicted peak):" in result.stdout
