"""bench's slide modes: the app's whole-slide prediction (its loader, a band of rows blended) and the loop a MONAI user
writes in Keras (zarr level, predict_on_batch, a full-size accumulator) time the same tiles, and agree a pixel."""

from __future__ import annotations

import dataclasses
import multiprocessing

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from slides import write_annotated_slides

from app.augment import eval_transforms
from app.bench.loading import TileClock
from app.bench.modes import child_main
from app.bench.slide_modes import SLIDES, run_model, sliding_window
from app.config import conf_dir, load
from app.data.sources.chosen import load_or_generate_source
from app.errors import ConfigError, DataError
from app.inference.slide_masks import blend_weights, tiling_of
from app.inference.slide_predictions import SlideSink, predict_slides
from app.loader.settings import Queue
from app.schema import SLIDE_BENCH_MODES, register

register()
CLASSES = ["glass", "stripes", "dots"]


def bench_config(root, *extra: str):
    data = ["data=folder", f"data.path={root / 'slides'}", f"data.masks={root / 'polygons'}", "data.task=segmentation",
            f"data.classes=[{','.join(CLASSES)}]", "data.masks_background=glass", "data.patches.size=[32,32]",
            "data.patches.level=0", "data.image_size=[32,32]", "data.batch_size=16", "model.widths=[8]"]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return load(compose("bench", [*data, "bench.warmup=1", "bench.memory=false", *extra]))


def in_process(mode: str, config) -> dict:
    """`mode`'s result as bench's child process makes it (child_main), run in this process, one worker."""
    parent_end, child_end = multiprocessing.Pipe(duplex=False)
    child_main(mode, config, Queue(workers=1), child_end)
    return parent_end.recv()


@dataclasses.dataclass(kw_only=True)
class Recorded(SlideSink):
    """A sink that keeps the rows the app hands it: their blended scores and where a tile reached."""

    rows: dict = dataclasses.field(default_factory=dict)

    def take(self, top: int, scores: np.ndarray, covered: np.ndarray) -> None:
        super().take(top, scores, covered)
        for k in range(len(scores)):
            self.rows[top + k] = (scores[k].copy(), covered[k].copy())


def apps_rows(config, source, net) -> list[dict]:
    """Each validation slide's rows as the app's whole-slide prediction blends them, row → (scores, covered)."""
    tilings = [tiling_of(path, config.data.patches, SLIDES.overlap) for path in source.val.images.paths]
    sinks = {}
    predict_slides(config, tilings, (net, {"queue": Queue(workers=1)}, eval_transforms(config.augment, (32, 32)),
                                     SLIDES.blend),
                   (lambda k: Recorded(tiling=tilings[k], classes=3, none=3), sinks.__setitem__))
    return [sinks[k].rows for k in range(len(tilings))]


@pytest.mark.slow
def test_the_slide_modes_time_the_same_tiles_and_the_hand_loop_blends_the_apps_scores(tmp_path):
    write_annotated_slides(tmp_path, train=1, val=2, side=256)
    config = bench_config(tmp_path, f"bench.modes=[{','.join(SLIDE_BENCH_MODES)}]")
    app, hand = (in_process(mode, config) for mode in SLIDE_BENCH_MODES)
    for result in (app, hand):
        assert "error" not in result, result.get("traceback")
        assert result["images_per_s"] == result["tiles_per_s"] > 0 and result["unit"] == "tiles"
    assert app["slides"] == hand["slides"] == 2 and app["tiles"] == hand["tiles"]
    assert app["timed_tiles"] == hand["timed_tiles"] == app["tiles"] - 16  # after the warmup's batch of 16
    assert app["class_pixels"] == hand["class_pixels"] and sum(app["class_pixels"]) > 0  # the covered pixels' classes
    # each pixel's scores and class, the app's and the hand loop's, from the model bench builds (seeded) in each
    source = load_or_generate_source(config.data)
    net = run_model(config, source)
    for rows, path in zip(apps_rows(config, source, net), source.val.images.paths, strict=True):
        tiling = tiling_of(path, config.data.patches, SLIDES.overlap)
        at = sorted(rows)
        theirs, covered = (np.stack([rows[row][i] for row in at]) for i in (0, 1))
        blended, reached = sliding_window(tiling, net, blend_weights(tiling.tile, SLIDES.blend), 16)
        assert covered.sum() > 0 and (reached[at] == covered).all()
        np.testing.assert_allclose(blended[at][covered], theirs[covered], atol=1e-5)
        assert (blended[at][covered].argmax(-1) == theirs[covered].argmax(-1)).mean() >= 0.99
        # negative control: the comparison sees another blend's scores
        mean, _ = sliding_window(tiling, net, blend_weights(tiling.tile, "mean"), 16)
        assert np.abs(mean[at][covered] - theirs[covered]).max() > 1e-3


def test_a_slide_mode_is_named_not_a_default_and_needs_a_segmentation_run_on_slides(tmp_path):
    """The slide modes run where bench.modes names them; without data.patches each is refused as its result."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        assert not set(SLIDE_BENCH_MODES) & set(load(compose("bench", [])).bench.modes)
        config = load(compose("bench", ["data=synthetic", f"data.path={tmp_path}", "data.num_images=8",
                                        "data.source_size=32", "data.image_size=[16,16]", "data.batch_size=2",
                                        "bench.warmup=0", "bench.memory=false", "bench.modes=[slide_predict]"]))
        with pytest.raises(ConfigError, match="bench.modes"):  # negative control: an unknown mode is refused
            load(compose("bench", ["bench.modes=[slide_predicting]"]))
    assert "data.task=segmentation and data.patches.size" in in_process("slide_predict", config)["error"]


def test_the_tile_clock_times_the_tiles_after_the_warmup_to_the_last_map():
    clock = ticked(TileClock(warmup=1), (16, 16, 5))  # a slide's last batch may be short
    result = clock.result()
    assert result["timed_tiles"] == 21 and result["timed_batches"] == 2 and result["tiles_per_s"] > 0
    assert result["timed_seconds"] == clock.end - clock.marks[0][0]
    with pytest.raises(DataError, match=r"37 tiles make 3 batches, none left to time after bench.warmup=3"):
        ticked(TileClock(warmup=3), (16, 16, 5)).result()


def ticked(clock: TileClock, batches: tuple[int, ...]) -> TileClock:
    for tiles in batches:
        clock.tick(tiles)
    clock.finish()
    return clock
