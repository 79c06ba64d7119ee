"""predict's slides, each whole, through one loader: a slide with tiles that cannot be read gets its files and a row
saying how many; one none of whose tiles can be read, a row with why and no file; each slide one row."""

import csv

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from slides import tiles_of, write_annotated_slides

from app.augment import eval_transforms
from app.config import conf_dir, load
from app.inference.slide_masks import tiling_of
from app.inference.slide_predictions import SlideWriter, predict_slides
from app.loader.settings import Queue
from app.schema import register

register()
NAMES = ["glass", "stripes", "dots"]


class Glass:
    """A model that calls every pixel glass: what is tested here is where its answers go."""

    def predict_on_batch(self, x):
        scores = np.zeros((*x.shape[:3], len(NAMES)), np.float32)
        scores[..., 0] = 1
        return scores


def damaged(path, tiles: slice) -> None:
    data = bytearray(path.read_bytes())
    for offset, count in tiles_of(path, slice(0, 1))[tiles]:
        data[offset:offset + count] = bytes(count)
    path.write_bytes(bytes(data))


@pytest.fixture
def predicted(tmp_path):
    write_annotated_slides(tmp_path, train=1, val=2, side=256, tile=64)
    val = sorted((tmp_path / "slides" / "val").glob("*.tif"))
    damaged(val[0], slice(None))  # every level-0 tile
    damaged(val[1], slice(0, 1))  # its first alone
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        config = load(compose("config", ["data=folder", f"data.path={tmp_path / 'slides'}", "data.task=segmentation",
                                         f"data.classes=[{','.join(NAMES)}]", f"data.masks={tmp_path / 'polygons'}",
                                         "data.masks_background=glass", "data.patches.size=[32,32]",
                                         "data.patches.level=0", "data.patches.min_foreground=0",
                                         "data.image_size=[32,32]", "data.batch_size=8"]))
    tilings = [tiling_of(str(path), config.data.patches, 0.25) for path in val]
    writer = SlideWriter(tmp_path / "out", tmp_path / "slides" / "val", NAMES, none=0, probability=None)
    transforms = eval_transforms(config.augment, config.data.image_size)
    predict_slides(config, tilings, (Glass(), {"queue": Queue(workers=1)}, transforms, "gaussian"),
                   (lambda k: writer.sink_of(tilings[k], tmp_path / "scratch" / str(k)),
                    lambda k, sink: writer.write(sink)))
    return writer, tilings, tmp_path / "out"


def test_a_slide_with_unreadable_tiles_is_named_and_the_others_predicted(predicted):
    writer, tilings, out = predicted
    rows = sorted(writer.rows, key=lambda row: row[0])
    assert [row[0].rsplit("/", 1)[-1] for row in rows] == ["val-0.tif", "val-1.tif"]  # one row a slide
    whole, part = rows
    assert whole[1] == "" and whole[-1] == f"none of its {tilings[0].tiles} tiles could be read"
    assert not (out / "masks" / "val-0.tif").exists()
    assert part[1] == "masks/val-1.tif" and (out / "masks" / "val-1.tif").is_file()
    assert part[-1].endswith("tiles could not be read") and int(part[-1].split()[0]) >= 1
    assert float(part[4]) == 1.0  # every predicted pixel glass, as the model says
    assert len(list(csv.reader([",".join(map(str, writer.header()))]))[0]) == len(part)


def test_the_blending_threads_error_is_the_commands_and_the_model_stops_there(tmp_path):
    write_annotated_slides(tmp_path, train=1, val=1, side=256, tile=64)
    val = sorted((tmp_path / "slides" / "val").glob("*.tif"))
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        config = load(compose("config", ["data=folder", f"data.path={tmp_path / 'slides'}", "data.task=segmentation",
                                         f"data.classes=[{','.join(NAMES)}]", f"data.masks={tmp_path / 'polygons'}",
                                         "data.patches.size=[32,32]", "data.patches.level=0",
                                         "data.patches.min_foreground=0", "data.image_size=[32,32]",
                                         "data.batch_size=8"]))
    tilings = [tiling_of(str(path), config.data.patches, 0.25) for path in val]

    class Full:  # a sink whose disk is full once the first rows come
        def take(self, *_):
            raise OSError(28, "No space left on device")

    class Counting(Glass):
        calls = 0

        def predict_on_batch(self, x):
            Counting.calls += 1
            return super().predict_on_batch(x)

    transforms = eval_transforms(config.augment, config.data.image_size)
    with pytest.raises(OSError, match="No space left"):
        predict_slides(config, tilings, (Counting(), {"queue": Queue(workers=1)}, transforms, "gaussian"),
                       (lambda k: Full(), lambda k, sink: None))
    batches = -(-tilings[0].tiles // 8)
    assert 1 <= Counting.calls < batches  # raised at the next batch, not after the slide's every tile
