"""The dashboards' files, read back with TensorBoard's own reader: what a resume cuts away, the
CSV logger, the grid of the first batch."""

from __future__ import annotations

import csv

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from app.schema import LOGGER_TARGETS
from app.tracking import dashboards


def steps(path, tag: str) -> list[int]:
    # purge_orphaned_data=False: TensorBoard would otherwise hide a restart's repeated steps itself
    events = EventAccumulator(str(path), size_guidance={"tensors": 0}, purge_orphaned_data=False)  # 0: keep all
    events.Reload()
    return [e.step for e in events.Tensors(tag)]


def write(run_dir, step_range) -> None:
    out = dashboards.writer(LOGGER_TARGETS["tensorboard"], run_dir)
    for step in step_range:
        out.scalars("train", {"step/loss": 1.0 / step}, step)
    out.finish_and_upload("completed")


def test_a_resume_cuts_the_events_after_its_checkpoint(tmp_path):
    write(tmp_path, range(1, 11))
    dashboards.rewrite_without_events_after(tmp_path, 5)
    assert steps(tmp_path / "tensorboard" / "train", "step/loss") == [1, 2, 3, 4, 5]
    write(tmp_path, range(6, 11))  # the resumed run writes steps 6.. again
    assert steps(tmp_path / "tensorboard" / "train", "step/loss") == list(range(1, 11))
    # negative control: without the cut, the redone steps are there twice
    bare = tmp_path / "bare"
    write(bare, range(1, 11))
    write(bare, range(6, 11))
    assert steps(bare / "tensorboard" / "train", "step/loss").count(6) == 2


def test_csv_logger_and_none(tmp_path):
    out = dashboards.writer(LOGGER_TARGETS["csv"], tmp_path)
    out.scalars("train", {"step/loss": 0.5, "step/accuracy": 0.25}, 3)
    out.scalars("validation", {"epoch/loss": 0.7}, 6)
    rows = list(csv.DictReader((tmp_path / "scalars.csv").open()))
    assert [(r["split"], r["tag"], r["step"]) for r in rows] == [("train", "step/loss", "3"),
                                                                   ("train", "step/accuracy", "3"),
                                                                   ("validation", "epoch/loss", "6")]
    dashboards.rewrite_without_events_after(tmp_path, 4)
    assert [r["step"] for r in csv.DictReader((tmp_path / "scalars.csv").open())] == ["3", "3"]
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    dashboards.writer(LOGGER_TARGETS["none"], quiet).scalars("train", {"step/loss": 1.0}, 1)
    assert not list(quiet.iterdir())


def test_the_first_batch_is_drawn_with_its_classes(tmp_path):
    batch = np.random.default_rng(0).integers(0, 256, (10, 16, 16, 3), dtype=np.uint8)
    out = dashboards.writer(LOGGER_TARGETS["tensorboard"], tmp_path)
    dashboards.write_first_batch(out, tmp_path, (batch, np.arange(10) % 2), ["cat", "dog"])
    out.finish_and_upload("completed")
    from PIL import Image

    sheet = Image.open(tmp_path / "augmented.png")
    assert sheet.size[0] > 8 * 16 and sheet.size[1] > 2 * 16  # two rows of eight, drawn larger
    events = EventAccumulator(str(tmp_path / "tensorboard" / "train"))
    events.Reload()
    (image,) = events.Tensors("augmented")
    assert len(tensor_util.make_ndarray(image.tensor_proto)) == 2 + 10  # width, height, then each image
