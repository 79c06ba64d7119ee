"""A segmentation run's slides predicted whole (`predict`, `evaluate`): every slide's tiles (slide_masks.py) through one
loader, in order; each slide's finished rows handed to its `SlideSink` (predict: a pyramid of classes, optionally one
class's probability, a thumbnail with the classes over it, each class's area; evaluate: the confusion against the
slide's annotation), a slide's band of rows in memory at a time."""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from app.capacity.auto import loading_only
from app.data.masked import MaskRule
from app.data.pixels.decode import DecodeError
from app.data.slides.masks import thumbnail
from app.data.slides.patches import ListedPatches
from app.data.slides.region_masks import RegionMask, Window
from app.data.source import FileSplit
from app.errors import DataError, config_error
from app.inference import pyramids
from app.inference.pixel_predictions import output_name
from app.inference.slide_masks import RowBlender, Tiling, at_tile, blend_weights, tiling_of
from app.io import write_picture
from app.loader.pipeline import build_loader
from app.measures import pixel_confusion
from app.processes import stop_if_interrupted
from app.sheets import class_colours, overlay, rgb_view, with_legend

PROGRESS_AFTER_S = 2


@dataclass(kw_only=True)
class SlideSink:
    """What one slide's finished rows become: its classes' pixel counts, and (predict) its pyramids on disk or
    (evaluate) its confusion against `annotation`."""

    tiling: Tiling
    classes: int
    none: int  # what a pixel no tile reached is: data.masks_background's class where set, else no class
    canvas: pyramids.Canvas | None = None
    probability: tuple[int, pyramids.Canvas] | None = None  # a class's index and its canvas
    annotation: RegionMask | None = None
    counts: np.ndarray = field(init=False)
    confusion: np.ndarray = field(init=False)
    failed: int = 0  # tiles that could not be read

    def __post_init__(self):
        self.counts = np.zeros(self.classes, np.int64)
        self.confusion = np.zeros((self.classes, self.classes + 1), np.int64)  # the last column: not predicted

    def take(self, top: int, scores: np.ndarray, covered: np.ndarray) -> None:
        predicted = np.where(covered, scores.argmax(axis=-1), self.none)
        classed = predicted < self.classes
        self.counts += np.bincount(predicted[classed].ravel(), minlength=self.classes)[:self.classes]
        if self.canvas is not None:
            self.canvas.write_rows(top, predicted.astype(self.canvas.levels[0].dtype))
        if self.probability is not None:
            index, canvas = self.probability
            canvas.write_rows(top, np.where(covered, np.rint(scores[..., index] * 255), 0).astype(np.uint8))
        if self.annotation is not None:  # a pixel of no class counted apart, in the last column
            self._score(top, np.where(classed, predicted, self.classes))

    def _score(self, top: int, predicted: np.ndarray) -> None:
        (sy, sx), rows = self.tiling.scale, predicted.shape[0]
        truth = self.annotation.read(Window(corner=(top * sy, 0), extent=(rows * sy, predicted.shape[1] * sx),
                                            size=predicted.shape)).astype(np.int64)
        scored = truth < self.classes  # the ignore index (past the classes) left out
        self.confusion += pixel_confusion(truth[scored], predicted[scored], self.classes + 1)[:self.classes]

    @property
    def mpp(self) -> float | None:  # the map's µm a pixel, where the slide records its own
        slide = self.tiling.layout.slide
        return None if slide.mpp is None else slide.mpp * self.tiling.scale[1]


def predict_slides(config, tilings: list[Tiling], model: tuple, sinks: tuple[Callable, Callable]) -> None:
    """Every slide's tiles through one loader (`model`: net, loader settings, transforms, blend), its rows into
    `sink_of(k)`'s sink, `done(k, sink)` once whole; a thread blends a batch while the model predicts the next."""
    (net, loading, transforms, blend), (sink_of, done) = model, sinks  # loading: build_loader's settings= or queue=
    split = _tiles_split(tilings, config.data.patches)
    with (build_loader(config, {"predict": (split, transforms)}, on_bad_sample="mark", **loading) as loader,
          tqdm(total=len(split), desc="predict", unit="tile", file=sys.stderr, delay=PROGRESS_AFTER_S, leave=False,
               dynamic_ncols=True) as bar,
          ThreadPoolExecutor(max_workers=1, thread_name_prefix="app-blend") as blending):
        rows = _SlideRows(split, tilings, blend, sinks=sinks, failed=lambda: loader.failed("predict"))
        placed = None
        for x, _, positions in loader.readable("predict"):
            stop_if_interrupted()
            scores = np.asarray(net.predict_on_batch(x), np.float32)
            if placed is not None:
                placed.result()  # the batch before, blended: its error raised here
            placed = blending.submit(rows.place, scores, positions)
            bar.update(int(positions[-1]) + 1 - bar.n)
        if placed is not None:
            placed.result()
        rows.finish_all()
        failed = loader.failed("predict")
    for k in sorted({int(split.tile_of[p][0]) for p in failed} - rows.finished):  # every tile failed: no row of it
        sink = sink_of(k)
        sink.failed = sum(1 for p in failed if split.tile_of[p][0] == k)
        done(k, sink)


class _SlideRows:
    """The slides whose tiles are coming: each one's sink and band of rows (RowBlender), rows handed on when done."""

    def __init__(self, split: _Tiles, tilings: list[Tiling], blend: str, *, sinks: tuple[Callable, Callable],
                 failed: Callable):
        self.split, self.tilings, (self.sink_of, self.done), self.failed = split, tilings, sinks, failed
        self.weights = {tuple(t.tile): blend_weights(t.tile, blend) for t in tilings}
        self.taking, self.blenders, self.finished = {}, {}, set()  # slide k's sink and blender while its tiles come

    def place(self, scores: np.ndarray, positions: np.ndarray) -> None:
        # a batch's scores blended in (one batch in flight: rows come in order); finished rows and slides handed on
        for position, own in zip(positions, scores, strict=True):
            k, top, left = self.split.tile_of[int(position)]
            for before in [j for j in list(self.blenders) if j < k]:  # the slides before it are whole
                self._finish(before)
            if k not in self.blenders:
                tiling = self.tilings[k]
                self.taking[k], self.blenders[k] = self.sink_of(k), RowBlender(tiling, own.shape[-1],
                                                                              self.weights[tiling.tile])
            for row_top, blended, covered in self.blenders[k].finish_to(top):
                self.taking[k].take(row_top, blended, covered)
            self.blenders[k].add(top, left, at_tile(own, self.tilings[k].tile))

    def finish_all(self) -> None:
        for k in sorted(self.blenders):
            self._finish(k)

    def _finish(self, k: int) -> None:  # every tile of slide k read or failed: its last rows, then its sink done
        sink, blender = self.taking.pop(k), self.blenders.pop(k)
        for row_top, blended, covered in blender.finish_to(blender.tiling.shape[0]):
            sink.take(row_top, blended, covered)
        failed = list(self.failed())  # a copy at once: the copy-ahead thread adds to it
        sink.failed = sum(1 for p in failed if self.split.tile_of[p][0] == k)
        self.finished.add(k)
        self.done(k, sink)


class _Tiles(ListedPatches):
    """Every slide's tiles, in order, each one's (slide, top, left) in map pixels beside it."""

    tile_of: np.ndarray


def _tiles_split(tilings: list[Tiling], patches) -> _Tiles:
    tiles = [(k, top, left) for k, t in enumerate(tilings) for top, lefts in t.rows for left in lefts]
    corners = [tilings[k].corner(top, left) for k, top, left in tiles]
    image_of = np.array([k for k, _, _ in tiles], np.int32)
    paths = [t.layout.slide.path for t in tilings]
    split = _Tiles(FileSplit(paths, np.zeros(len(paths), np.int64)), [t.layout for t in tilings], patches,
                   places=(image_of, np.array(corners, np.int64).reshape(-1, 2), np.zeros(len(tiles), np.int64)))
    split.tile_of = np.array(tiles, np.int64).reshape(-1, 3)
    return split


def write_overlay(sink: SlideSink, names: list[str], path: Path) -> None:
    """The slide's thumbnail with each pixel's class laid over it (the canvas's smallest level), and the legend."""
    classes = sink.canvas.smallest()
    slide = sink.tiling.layout.slide
    downsample = slide.levels[0][1] / classes.shape[1]
    try:
        thumb, _ = thumbnail(slide, downsample)
        rgb = np.asarray(Image.fromarray(rgb_view(thumb[None])[0]).resize(classes.shape[::-1]))
    except DecodeError:  # tiles of it cannot be read (its row says how many): the classes over grey
        rgb = np.full((*classes.shape, 3), 128, np.uint8)
    colours = class_colours(len(names))
    picture = with_legend(Image.fromarray(overlay(rgb, classes, colours)), names, colours)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_picture(path, picture.save)



class SlideWriter:
    """predict's files of each slide under `out`: masks/<slide>.tif (classes), probabilities/<slide>.tif (one class's,
    0..255), overlays/<slide>.png, and its predictions.csv row, at the slide's path under `root`."""

    def __init__(self, out: Path, root: Path, names: list[str], *, none: int, probability: int | None):
        self.out, self.root, self.names, self.none, self.probability = out, root, names, none, probability
        self.rows: list[list] = []
        self.taken: set[Path] = set()

    def sink_of(self, tiling: Tiling, folder: Path) -> SlideSink:
        dtype = "uint8" if max(len(self.names), self.none) <= 255 else "uint16"
        canvas = pyramids.Canvas(folder / "classes", tiling.shape, dtype, self.none)
        chosen = None if self.probability is None else \
            (self.probability, pyramids.Canvas(folder / "probability", tiling.shape, "uint8", 0))
        return SlideSink(tiling=tiling, classes=len(self.names), none=self.none, canvas=canvas, probability=chosen)

    def write(self, sink: SlideSink) -> None:
        """The slide's pyramids, overlay and row; a slide none of whose tiles could be read: its row, with why."""
        path = sink.tiling.layout.slide.path
        if sink.failed == sink.tiling.tiles:
            self.rows.append([path, "", "", sink.tiling.tiles, *([""] * (2 * len(self.names) + 1)),
                              f"none of its {sink.failed} tiles could be read"])
            return
        named = output_name(path, self.root, self.taken, ".tif")
        canvases = [("masks", sink.canvas)] + ([("probabilities", sink.probability[1])] if sink.probability else [])
        for folder, canvas in canvases:
            (self.out / folder / named).parent.mkdir(parents=True, exist_ok=True)
            pyramids.write_pyramid(canvas, self.out / folder / named, sink.mpp, name=Path(path).name)
        write_overlay(sink, self.names, self.out / "overlays" / named.with_suffix(".png"))
        total = max(int(sink.counts.sum()), 1)
        areas = [f"{count * sink.mpp ** 2:.1f}" if sink.mpp else "" for count in sink.counts]
        error = f"{sink.failed} tiles could not be read" if sink.failed else ""
        self.rows.append([path, f"masks/{named}", f"overlays/{named.with_suffix('.png')}", sink.tiling.tiles,
                          *(f"{count / total:.6f}" for count in sink.counts), *areas,
                          f"probabilities/{named}" if sink.probability else "", error])

    def header(self) -> list[str]:
        return ["path", "mask", "overlay", "tiles", *self.names, *(f"{name}_um2" for name in self.names),
                "probability", "error"]



def none_value(rule) -> int:
    """A map's value where no tile reached (outside the tissue): data.masks_background's class where set (what the
    annotation calls unannotated), else the ignore index, else the largest value of the map's type."""
    if rule.background is not None:
        return rule.background
    return rule.ignore_index if rule.ignore_index is not None else (255 if rule.classes <= 255 else 65535)


def predict_to_files(config, given, inputs: tuple[list[Path], Path], model: tuple) -> list[list]:
    """predict's slides (`given`: the predict group; `inputs`: the files, their folder, predictions.csv): their files
    beside predictions.csv and its rows; a slide that cannot be read, or has no tissue, gets its row with why."""
    (files, root, out), (net, names, settings, transforms) = inputs, model
    if given.probability is not None and given.probability not in names:
        raise config_error("predict.probability", given.probability, f"null or one of the run's classes {names}")
    writer = SlideWriter(out.parent, root, names, none=none_value(MaskRule.of(config.data)),
                         probability=None if given.probability is None else names.index(given.probability))
    tilings, gone = [], []
    for path in files:
        try:
            tiling = tiling_of(str(path), config.data.patches, given.overlap)
        except DataError as error:
            gone.append((str(path), str(error)))
            continue
        if tiling.rows:
            tilings.append(tiling)
        else:
            gone.append((str(path), "no tile of it has foreground (data.patches' mask), or it is smaller than a tile"))
    with pyramids.scratch(out.parent) as folder:
        predict_slides(config, tilings, (net, {"settings": settings}, transforms, given.blend),
                       (lambda k: writer.sink_of(tilings[k], Path(folder) / str(k)),
                        lambda k, sink: writer.write(sink)))
    blank = [""] * (2 * len(names) + 2)
    return [writer.header(), *writer.rows, *([path, "", "", 0, *blank, why] for path, why in gone)]


def slide_confusions(config, split, model: tuple, given) -> list[tuple[str, np.ndarray | str]]:
    """Each slide of a patch split with masks, predicted whole and scored against its annotation: (path, its
    classes × (classes + 1) confusion, the last column the pixels no tile reached), or (path, why it has none)."""
    (net, transforms), (rule, masks) = model, split.masks
    tilings, gone, annotations = [], [], []
    for k, path in enumerate(split.images.paths):
        tiling = tiling_of(path, config.data.patches, given.overlap)
        if not tiling.rows:
            gone.append((path, "no tile"))
            continue
        tilings.append(tiling)
        annotations.append(masks[k])
    found: dict[int, SlideSink] = {}
    none = none_value(rule)
    predict_slides(config, tilings, (net, {"queue": loading_only(config.queue)}, transforms, given.blend), (
        lambda k: SlideSink(tiling=tilings[k], classes=rule.classes, none=none, annotation=annotations[k]),
        found.__setitem__))
    return [(t.layout.slide.path, found[k].confusion if k in found else "no tile could be read")
            for k, t in enumerate(tilings)] + gone
