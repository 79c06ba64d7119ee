"""`slide_predict` and `keras_slide_loop`: the validation slides of a segmentation run on data.patches predicted whole
by the app (its loader, a band of rows blended) and by the loop a MONAI user writes in Keras, on the same tiles, model,
overlap and blend. Their figure is tiles a second (`images_per_s` too): the first `bench.warmup` batches of tiles
untimed, then every tile after them to the last slide's map; `bench.batches` does not apply (a slide is whole)."""

from __future__ import annotations

import time

import cv2
import keras
import numpy as np
import tifffile

from app.augment import eval_transforms
from app.bench.loading import Run
from app.data.pixels.pixels import run_pixels
from app.data.slides.patches import PatchSplit
from app.errors import DataError
from app.inference.slide_masks import Tiling, at_tile, blend_weights, tiling_of
from app.inference.slide_predictions import SlideSink, predict_slides
from app.model import build
from app.schema import SlidePredictConfig
from app.tasks import task_of

SLIDES = SlidePredictConfig()  # predict's overlap and blend (conf/predict.yaml): bench has no predict group


def run_model(config, source) -> keras.Model:
    # the run's model as train builds it (recipe.new_compiled_model, uncompiled): untrained, as speed does not depend
    # on the weights; seeded, so that each mode's process builds the same one
    keras.utils.set_random_seed(config.seed)
    task = task_of(config.data.task)
    return build(config.model, config.data.image_size, len(source.class_names), activation=task.activation,
                 pixels=run_pixels(config.data, source.train), output=task.output)


class _Ticking:  # the model, the clock ticked with each batch's tiles once they are predicted
    def __init__(self, net: keras.Model, clock):
        self.net, self.clock = net, clock

    def predict_on_batch(self, x: np.ndarray):
        scores = self.net.predict_on_batch(x)
        self.clock.tick(len(x))
        return scores

    def __getattr__(self, name: str):  # the rest is the model's: its input and output shapes
        return getattr(self.net, name)


def _slides(run: Run) -> tuple[list[Tiling], keras.Model]:  # the validation slides' tilings with tissue, the model
    config, source = run.config, run.source
    if not isinstance(source.val, PatchSplit) or task_of(config.data.task).output != "pixels":
        raise DataError(f"{run.mode} predicts a segmentation run's slides whole: set data.task=segmentation and "
                        "data.patches.size (docs/slides.md), or leave it out of bench.modes")
    tilings = [tiling_of(path, config.data.patches, SLIDES.overlap) for path in source.val.images.paths]
    tilings = [tiling for tiling in tilings if tiling.rows]
    if not tilings:
        raise DataError(f"{run.mode}: no validation slide has a tile with foreground (data.patches' mask)")
    return tilings, run_model(config, source)


def _figures(tilings: list[Tiling], counts: list[np.ndarray]) -> dict:
    # the pixels a tile reached, of each class (the app's sinks take a pixel no tile reached as of no class)
    return {"unit": "tiles", "tiles": sum(t.tiles for t in tilings), "slides": len(tilings),
            "class_pixels": np.sum(counts, axis=0).tolist()}


def _slide_predict(run: Run) -> dict:
    """The app's: tiling_of, predict_slides through the loader (bench's queue), SlideSinks that only count."""
    config, clock = run.config, run.clock
    tilings, net = _slides(run)
    classes, sinks = len(run.source.class_names), {}
    transforms = eval_transforms(config.augment, config.data.image_size)
    clock.start = time.perf_counter()
    predict_slides(config, tilings, (_Ticking(net, clock), {"queue": run.queue}, transforms, SLIDES.blend),
                   (lambda k: SlideSink(tiling=tilings[k], classes=classes, none=classes), sinks.__setitem__))
    clock.finish()
    return _figures(tilings, [sinks[k].counts for k in sorted(sinks)])


def _keras_slide_loop(run: Run) -> dict:
    """The peer: one process, no workers; each slide's tiles read from its zarr level and blended (sliding_window)."""
    config, clock = run.config, run.clock
    tilings, net = _slides(run)
    ticking, classes, counts = _Ticking(net, clock), len(run.source.class_names), []
    clock.start = time.perf_counter()
    for tiling in tilings:
        blended, covered = sliding_window(tiling, ticking, blend_weights(tiling.tile, SLIDES.blend),
                                          config.data.batch_size)
        counts.append(np.bincount(blended.argmax(axis=-1)[covered], minlength=classes))
    clock.finish()
    return _figures(tilings, counts)


def sliding_window(tiling: Tiling, net, weights: np.ndarray, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """A slide's scores a map pixel, and where a tile reached, as a hand-written sliding window blends them: uint8
    tiles batched, weighed into a float32 accumulator the map's size, divided by the weights (MONAI's)."""
    import zarr  # noqa: PLC0415 - as app/data/slides/regions.py: the other Keras modes never pay its import

    height, width = tiling.shape
    scores = np.zeros((height, width, net.output_shape[-1]), np.float32)
    weight = np.zeros((height, width), np.float32)
    places = [(top, left) for top, lefts in tiling.rows for left in lefts]
    with tifffile.TiffFile(tiling.layout.slide.path) as tif:
        level = zarr.open(tif.series[0].aszarr(level=tiling.layout.level), mode="r")
        for start in range(0, len(places), batch):
            chunk = places[start:start + batch]
            x = np.stack([_tile(level, tiling, place, net.input_shape[1:3]) for place in chunk])
            for (top, left), own in zip(chunk, np.asarray(net.predict_on_batch(x), np.float32), strict=True):
                own = at_tile(own, tiling.tile)
                h, w = own.shape[:2]
                scores[top:top + h, left:left + w] += own * weights[:h, :w, None]
                weight[top:top + h, left:left + w] += weights[:h, :w]
    return scores / np.maximum(weight, 1e-12)[..., None], weight > 0


def _tile(level, tiling: Tiling, place: tuple[int, int], size: tuple[int, int]) -> np.ndarray:
    # the tile's corner at its level as the app's reader places it (ListedPatches.region_of), resized to the model's
    # input where the level read is not at the tile's resolution
    layout, (top, left) = tiling.layout, tiling.corner(*place)
    scale, (height, width) = layout.slide.downsample(layout.level), level.shape[:2]
    y, x = min(int(top / scale), height - layout.read[0]), min(int(left / scale), width - layout.read[1])
    region = np.asarray(level[y:y + layout.read[0], x:x + layout.read[1]])
    if region.shape[:2] != tuple(size):
        region = cv2.resize(region, tuple(size)[::-1], interpolation=cv2.INTER_AREA)
    return region if region.ndim == 3 else region[..., None]


SLIDE_MODES = {"slide_predict": _slide_predict, "keras_slide_loop": _keras_slide_loop}
