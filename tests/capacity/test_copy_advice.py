"""app/capacity/copy_advice.py: a run on its loader with a worker on every core is told the `prepare` of its data and
the `train` on the copy (run as printed, through the real CLI, they make a copy and train on it), and the pace a copy
would give, from samples stored as prepare stores them and timed from there."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from docs_runner import OneProcess
from PIL import Image

from app.capacity.copy_advice import advice, commands

# two epochs: the diagnosis reads the last, the loader's own pace (the first's is the workers' start and the step's
# tracing: forked workers start in a blink)
RUN = ["data=folder", "data.image_size=[32,32]", "data.batch_size=8", "model.widths=[8]", "trainer.epochs=2",
       "logger=none", "data.decode.draft=false"]


def test_the_commands_keep_what_a_copy_is_made_of_and_what_the_run_trains_with(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overrides = ["data=folder", "data.path=/photos", "data.masks=/m", "seed=3", "augment=none", "model.widths=[8]",
                 "queue.workers=16", "hydra.run.dir=x", "data.num_images=9", "experiment=cifar_resnet"]
    data = SimpleNamespace(path="/photos", image_size=[224, 224], batch_size=64)
    prepare, train = commands(overrides, data, full=False)
    out = re.search(r"prepare.out=(\S+)", prepare).group(1)
    assert prepare == ("python -m app prepare data=folder data.path=/photos data.masks=/m seed=3 augment=none "
                       f"data.num_images=9 experiment=cifar_resnet prepare.out={out}")
    assert out.startswith(f"{tmp_path}/datasets/prepared-photos-224x224-")
    # on the copy: its own folder and splits; the data keys a copy has, the rest of the run as it was, and its size
    # and batch as the run had them, whatever set them (an experiment, the data group's own defaults)
    assert train == (f"python -m app train data=prepared data.path={out} seed=3 augment=none 'model.widths=[8]' "
                     "queue.workers=16 experiment=cifar_resnet 'data.image_size=[224,224]' data.batch_size=64")
    # crops that cannot tell the side a copy needs: each image whole; another copy, another folder
    whole, _ = commands(overrides, data, full=True)
    assert "prepare.short_side=full prepare.out=" in whole and out not in whole
    # a table's weights: a copy has none to draw by
    _, weighted = commands(["data=table", "data.sampling=weights", "data.sampling=balanced"], data, full=False)
    assert "weights" not in weighted and "data.sampling=balanced" in weighted


def test_the_advice_predicts_from_the_copys_sample_time_and_the_steps_own():
    row = {"images_per_s": 100.0, "data_wait_fraction": 0.8}  # batch 64: 640 ms a batch, the step 128 of it
    told = advice(row, 16, 64, ("P", "T", 0.010))  # 64 × 10 ms / 16 workers: 40 ms, the step binds
    assert "`P`, then `T`" in told and "predicted 500 images/s with the step waiting 0 %" in told
    slow = advice(row, 16, 64, ("P", "T", 0.064))  # 256 ms a batch: the copy still binds
    assert "predicted 250 images/s with the step waiting 50 %" in slow
    assert "not timed" in advice(row, 16, 64, ("P", "T", None))  # negative control: nothing measured, no figure


def write_photos(folder: Path, count: int = 24) -> None:
    """PNG photos of 960×720 in two classes: decoded whole (no draft), far slower than a tiny model's step."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:720, 0:960]
    for i in range(count):
        cls = folder / "ab"[i % 2]
        cls.mkdir(parents=True, exist_ok=True)
        base = (np.sin(xx / (9 + i)) + np.cos(yy / (7 + i % 2 * 5)))[..., None] * 60 + 120
        pixels = np.clip(base + rng.normal(0, 25, (720, 960, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(cls / f"{i}.png")


@pytest.mark.slow
def test_the_advice_run_as_printed_makes_a_copy_the_run_then_trains_on(tmp_path):
    write_photos(tmp_path / "images")
    cores = len(os.sched_getaffinity(0))
    app = OneProcess(env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        first = app("train", *RUN, f"data.path={tmp_path / 'images'}", f"queue.workers={cores}",
                    f"hydra.run.dir={tmp_path / 'originals'}", cwd=tmp_path)
        assert first.returncode == 0, first.stderr[-3000:]
        said = json.loads((tmp_path / "originals" / "summary.json").read_text())["diagnosis"]
        assert "input-bound" in said and f"not more workers ({cores} already on {cores} cores)" in said, said
        prepare, train = re.findall(r"`(python -m app [^`]+)`", said)
        assert re.search(r"a sample built from it here: [\d.]+ ms; predicted \d+ images/s", said), said
        made = app(*shlex.split(prepare)[3:], cwd=tmp_path)
        assert made.returncode == 0 and "prepared 24 files" in made.stdout, made.stderr[-3000:]
        copy = Path(shlex.split(prepare)[-1].split("=", 1)[1])
        assert copy.parent == tmp_path / "datasets" and (copy / "manifest.json").is_file()
        again = app(*shlex.split(train)[3:], cwd=tmp_path)
        assert again.returncode == 0, again.stderr[-3000:]
    finally:
        app.close()
    summary = json.loads(next((tmp_path / "outputs").rglob("summary.json")).read_text())
    assert summary["status"] == "completed" and f"data.path={copy}" in summary["overrides"]
    # on the copy the diagnosis advises no copy again (negative control: the originals' did)
    assert "python -m app prepare" not in summary["diagnosis"]
