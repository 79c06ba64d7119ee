"""TensorBoard's event files as app/tracking/event_files.py writes them without TensorFlow: each
summary read back by TensorBoard's own reader and its plugins' own parsing, the same as
tf.summary writes, a rewrite that stops at a record cut short, and a JAX run that trains and
writes its dashboard with TensorFlow hidden from the process."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.util import tensor_util

from app.schema import LOGGER_TARGETS
from app.tracking import dashboards, event_files

BATCH = np.random.default_rng(0).integers(0, 256, (3, 5, 7, 3), dtype=np.uint8)  # 3 images, 5 high, 7 wide


def loaded(path: Path) -> EventAccumulator:
    events = EventAccumulator(str(path), size_guidance={"tensors": 0})  # 0: keep all
    events.Reload()
    return events


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)))


def write_every_summary(run_dir: Path) -> None:
    out = dashboards.writer(LOGGER_TARGETS["tensorboard"], run_dir)
    out.begin({"seed": 3, "trainer": {"epochs": 2, "jit": True}, "tags": ["a", "b"]}, trial="t0", step=0)
    out.scalars("train", {"step/loss": 0.5}, 4)
    out.images("augmented", BATCH, 0)
    out.finish_and_upload("completed")


def test_each_summary_is_read_back_by_tensorboards_own_plugins(tmp_path):
    write_every_summary(tmp_path)
    train = loaded(tmp_path / "tensorboard" / "train")
    # what each plugin lists as its own: how TensorBoard's tabs find their tags
    assert {plugin: set(train.PluginTagToContent(plugin)) for plugin in ("scalars", "images", "text")} == {
        "scalars": {"step/loss"}, "images": {"augmented"}, "text": {"tags"}}
    ((loss,),) = [train.Tensors("step/loss")]
    assert (loss.step, tensor_util.make_ndarray(loss.tensor_proto).dtype) == (4, np.float32)
    assert tensor_util.make_ndarray(loss.tensor_proto) == 0.5
    (image,) = train.Tensors("augmented")
    width, height, *pngs = tensor_util.make_ndarray(image.tensor_proto)
    assert (width, height, len(pngs)) == (b"7", b"5", 3)
    assert all(np.array_equal(pixels(png), original) for png, original in zip(pngs, BATCH, strict=True))
    assert not np.array_equal(pixels(pngs[0]), BATCH[1])  # negative control: the images differ
    (tags,) = train.Tensors("tags")
    assert tensor_util.make_ndarray(tags.tensor_proto) == b"a, b"
    # HParams: at the run's top, parsed by the hparams plugin's own code
    top = loaded(tmp_path / "tensorboard")
    (start,) = top.Tensors(hparams_metadata.SESSION_START_INFO_TAG)
    content = top.SummaryMetadata(hparams_metadata.SESSION_START_INFO_TAG).plugin_data.content
    info = hparams_metadata.parse_session_start_info_plugin_data(content)
    assert (start.step, info.group_name) == (0, "t0")
    assert {name: value.WhichOneof("kind") for name, value in info.hparams.items()} == {
        "seed": "number_value", "trainer.epochs": "number_value", "trainer.jit": "bool_value",
        "tags": "string_value"}
    assert (info.hparams["trainer.epochs"].number_value, info.hparams["tags"].string_value) == (2, "['a', 'b']")
    # negative control: a tensor summary without plugin metadata is in no plugin's list
    bare = event_files.EventFile(tmp_path / "bare")
    bare.write_summary(summary_pb2.Summary(value=[summary_pb2.Summary.Value(
        tag="plain", tensor=tensor_util.make_tensor_proto(np.float32(1)))]), 1)
    bare.close()
    plain = loaded(tmp_path / "bare")
    assert plain.Tags()["tensors"] == ["plain"]
    for plugin in ("scalars", "images", "text"):
        with pytest.raises(KeyError, match="could not be found"):
            plain.PluginTagToContent(plugin)


def summaries(path: Path) -> dict:
    """Each tag's (step, plugin, plugin content, dtype, shape, values) of a folder's events; PNGs
    decoded to their pixels (encoders differ in bytes)."""
    events, found = loaded(path), {}
    for tag in events.Tags()["tensors"]:
        (event,) = events.Tensors(tag)
        meta, value = events.SummaryMetadata(tag).plugin_data, tensor_util.make_ndarray(event.tensor_proto)
        if meta.plugin_name == "images":
            value = [value[0], value[1], *(pixels(png).tolist() for png in value[2:])]
        found[tag] = (event.step, meta.plugin_name, meta.content, event.tensor_proto.dtype,
                      [d.size for d in event.tensor_proto.tensor_shape.dim], np.asarray(value, dtype=object).tolist())
    return found


def test_the_summaries_are_those_tf_summary_writes(tmp_path):
    tf = pytest.importorskip("tensorflow")
    from tensorboard.plugins.hparams import api as hp

    with tf.summary.create_file_writer(str(tmp_path / "tf" / "tensorboard" / "train")).as_default(step=4):
        tf.summary.scalar("step/loss", 0.5)
        tf.summary.image("augmented", BATCH, max_outputs=len(BATCH))
        tf.summary.text("tags", "a, b")
    with tf.summary.create_file_writer(str(tmp_path / "tf" / "tensorboard")).as_default():
        hp.hparams({"seed": 3, "trainer.epochs": 2, "trainer.jit": True, "tags": "['a', 'b']"}, trial_id="t0")
    out = dashboards.writer(LOGGER_TARGETS["tensorboard"], tmp_path / "ours")
    out.hparams({"seed": 3, "trainer.epochs": 2, "trainer.jit": True, "tags": "['a', 'b']"}, trial="t0")
    out.tags(["a", "b"])
    out.scalars("train", {"step/loss": 0.5}, 4)
    out.images("augmented", BATCH, 4)
    out.finish_and_upload("completed")
    theirs = summaries(tmp_path / "tf" / "tensorboard" / "train")
    ours = summaries(tmp_path / "ours" / "tensorboard" / "train")
    assert set(theirs) == {"step/loss", "augmented", "tags"}
    ours["tags"] = (4, *ours["tags"][1:])  # the tags are written at step 0, tf.summary's here at 4
    assert ours == theirs
    top = [loaded(tmp_path / name / "tensorboard") for name in ("tf", "ours")]
    tag = hparams_metadata.SESSION_START_INFO_TAG
    infos = [hparams_metadata.parse_session_start_info_plugin_data(t.SummaryMetadata(tag).plugin_data.content)
             for t in top]
    assert [dict(info.hparams) for info in infos] == [dict(infos[0].hparams)] * 2 and len(infos[0].hparams) == 4
    assert infos[0].group_name == infos[1].group_name == "t0"
    # negative control: another value is told apart
    out = dashboards.writer(LOGGER_TARGETS["tensorboard"], tmp_path / "other")
    out.scalars("train", {"step/loss": 0.25}, 4)
    out.finish_and_upload("completed")
    assert summaries(tmp_path / "other" / "tensorboard" / "train")["step/loss"] != theirs["step/loss"]


def test_a_rewrite_stops_at_a_record_cut_short(tmp_path):
    out = dashboards.writer(LOGGER_TARGETS["tensorboard"], tmp_path)
    for step in range(1, 5):
        out.scalars("train", {"step/loss": float(step)}, step)
    out.finish_and_upload("completed")
    (path,) = (tmp_path / "tensorboard" / "train").glob("*tfevents*")
    whole = path.read_bytes()
    path.write_bytes(whole[:-3])  # the last record's write never finished
    event_files.rewrite_keeping_events(path, lambda event: True)
    assert [e.step for e in loaded(path.parent).Tensors("step/loss")] == [1, 2, 3]
    assert whole.startswith(path.read_bytes()) and len(path.read_bytes()) < len(whole) - 3
    # negative control: the whole file keeps every record, byte for byte
    path.write_bytes(whole)
    event_files.rewrite_keeping_events(path, lambda event: True)
    assert path.read_bytes() == whole


def test_files_are_named_in_the_order_they_are_made(tmp_path, monkeypatch):
    """TensorBoard reads a folder's event files in the order of their names: a resumed run's
    events after the first run's, though both files were made in one second of one process."""
    monkeypatch.setattr(event_files, "_NUMBER", itertools.count(9))  # 9, then 10: one digit more
    made = [event_files.EventFile(tmp_path) for _ in range(2)]
    for step, file in enumerate(made, start=1):
        file.write_summary(event_files.scalars({"step/loss": float(step)}), step)
        file.close()
    assert sorted(tmp_path.iterdir()) == [file.path for file in made]
    steps = [e.step for e in EventAccumulator(str(tmp_path), purge_orphaned_data=False).Reload().Tensors("step/loss")]
    assert steps == [1, 2]
    assert sorted(["9", "10"]) == ["10", "9"]  # negative control: numbers unpadded would sort the other way


# The child: TensorFlow hidden from the import system (find_spec answers None, `import tensorflow`
# raises ModuleNotFoundError, as where it is not installed), a stored machine probe (no probe
# processes, which would not inherit the hiding), then one tiny JAX run through the CLI's main.
