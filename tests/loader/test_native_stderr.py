"""app/loader/native_stderr.py: what C code prints in a worker names the sample, in a real worker process."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
from PIL import Image

LOAD = """
import sys
import numpy as np
from app.augment import Augmenter
from app.data.source import FileSplit
from app.loader.enqueuer import Enqueuer
from app.loader.pipeline import Loader
from app.loader.settings import Queue, Settings

paths = sys.argv[1:]
settings = Settings(batch_size=len(paths), image_size=(16, 16), queue=Queue(workers=1, max_size=1))
enqueuer = Enqueuer({"train": FileSplit(paths, [0] * len(paths))}, {"train": Augmenter([], (16, 16), draft=False)},
                    settings)
with Loader(enqueuer) as loader:
    for x, _ in loader.batches("train", np.arange(len(paths)), 0):
        print(x.shape)
"""


def test_libjpegs_warning_names_the_file_it_came_with(tmp_path):
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8)).save(buffer, "JPEG")
    raw = buffer.getvalue()
    good, corrupt = tmp_path / "good.jpg", tmp_path / "corrupt.jpg"
    good.write_bytes(raw)
    corrupt.write_bytes(raw[:-2] + b"\0\0" + raw[-2:])  # stray bytes before the end marker: decodes, with a warning
    result = subprocess.run([sys.executable, "-c", LOAD, str(good), str(corrupt)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "(2, 16, 16, 3)" in result.stdout
    warned = [line for line in result.stderr.splitlines() if "Corrupt JPEG data" in line]
    assert warned == [f"warning: {corrupt}: Corrupt JPEG data: 1 extraneous bytes before marker 0xd9"]
    assert str(good) not in result.stderr  # negative control: the good file is not named
