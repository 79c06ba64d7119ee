"""TensorBoard event files written as `tf.summary` writes them, and cut back keeping records byte for byte, by the
`tensorboard` package alone: its EventFileWriter imports TensorFlow, where installed, via `tensorboard.compat.tf`."""

from __future__ import annotations

import io
import itertools
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from PIL import Image
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.plugins.hparams import summary_v2 as hparams_summary
from tensorboard.plugins.image import metadata as image_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard.util import tensor_util

from app.io import atomic_write, open_own

# Two files of one process in one second get names of their own, in the order they were made:
# TensorBoard reads a folder's files in the order of their names (a resume's after the first run's).
_NUMBER = itertools.count()


class EventFile:
    """A new event file in `folder` (made if missing), named as TensorFlow names its own; on disk after `flush`."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}."
                f"{next(_NUMBER):06d}.v2")
        self.path = folder / name
        self._file = open_own(self.path, "wb")  # open until close(), as the run writes
        self._records = RecordWriter(self._file)
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()

    def write_summary(self, summary: summary_pb2.Summary, step: int) -> None:
        self._write(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def _write(self, event: event_pb2.Event) -> None:
        self._records.write(event.SerializeToString())

    def flush(self) -> None:
        if not self._file.closed:
            self._file.flush()

    def close(self) -> None:
        """The file closed; a second call does nothing."""
        if not self._file.closed:
            self._file.close()


def scalars(values: dict) -> summary_pb2.Summary:
    """Each value a float32 scalar, as tf.summary.scalar writes it (the Scalars tab)."""
    meta = scalar_metadata.create_summary_metadata(display_name=None, description=None)
    return summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor_util.make_tensor_proto(np.float32(value)))
        for tag, value in values.items()])


def images(tag: str, batch: np.ndarray) -> summary_pb2.Summary:
    """A uint8 batch (N, H, W, C of 1, 3 or 4) as tf.summary.image writes it (the Images tab)."""
    batch = np.asarray(batch, dtype=np.uint8)
    height, width = batch.shape[1:3]
    pngs = [_png(image) for image in batch]
    tensor = tensor_util.make_tensor_proto(np.array([str(width).encode(), str(height).encode(), *pngs], dtype=object))
    meta = image_metadata.create_summary_metadata(display_name=None, description=None)
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)])


def _png(image: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(out, format="PNG")
    return out.getvalue()


def text(tag: str, value: str) -> summary_pb2.Summary:
    """`value` as tf.summary.text writes it (the Text tab)."""
    meta = text_metadata.create_summary_metadata(display_name=None, description=None)
    tensor = tensor_util.make_tensor_proto(value)
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)])


def hparams(values: dict, trial: str) -> summary_pb2.Summary:
    """The trial's hyper-parameters as the hparams plugin's `hp.hparams` writes them (the HParams tab)."""
    return hparams_summary.hparams_pb(values, trial_id=trial)


def records(path: Path) -> Iterator[tuple[bytes, event_pb2.Event]]:
    """Each whole record of an event file and its event, up to the first one cut short or failing its checksum."""
    with open(path, "rb") as f:
        while len(header := f.read(12)) == 12:
            (length,), (header_crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
            if masked_crc32c(header[:8]) != header_crc:
                return
            data, footer = f.read(length), f.read(4)
            if len(data) < length or len(footer) < 4 or masked_crc32c(data) != struct.unpack("<I", footer)[0]:
                return
            yield header + data + footer, event_pb2.Event.FromString(data)


def rewrite_keeping_events(path: Path, keep: Callable[[event_pb2.Event], bool]) -> None:
    """Rewrites `path` with the records whose event `keep` accepts, byte for byte, via a temporary file."""
    kept = [record for record, event in records(path) if keep(event)]
    with atomic_write(path, "wb") as out:
        out.writelines(kept)
