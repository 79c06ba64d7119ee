"""`python -m app predict resume=<run dir> input=<folder, file or prepared copy>`: class probabilities from the run's
model.keras (its best) through training's loader, into <run dir>/predict/<date>_<time>/predictions.csv."""

from __future__ import annotations

import csv
import dataclasses
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from tqdm import tqdm

from app.augment import eval_transforms
from app.capacity.auto import loading_only
from app.commands import failure_carried
from app.config import conf_dir
from app.data.copies.prepared import prepared_source, run_patches
from app.data.copies.shards import MANIFEST
from app.data.copies.storage import is_url
from app.data.pixels.decode import Decode
from app.data.pixels.images import EXTENSIONS
from app.data.pixels.pixels import pixels_of
from app.data.slides.layouts import PROGRESS_AFTER_S
from app.data.slides.patches import grid_split
from app.data.source import FileSplit
from app.errors import ConfigError, DataError
from app.inference import patch_scores, pixel_predictions, slide_predictions
from app.inference.opened import open_run
from app.io import atomic_write
from app.loader.pipeline import build_loader
from app.loader.settings import Settings
from app.processes import stop_if_interrupted
from app.rules import predict as slide_rules
from app.runs.saved import STORAGE
from app.schema import register
from app.schema.data import PreparedDataConfig
from app.tasks import Task, task_of

register()
log = logging.getLogger("app.predict")


def image_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    # Whatever is no folder is listed: a link that leads nowhere or in a loop, a pipe or a device gets its row, which
    # says why it cannot be read (the loader never opens what is not a regular file).
    return sorted(p for p in path.rglob("*") if not p.is_dir() and p.suffix.lower() in EXTENSIONS
                  and not any(part.startswith(".") for part in p.relative_to(path).parts))


def _prepared_input(given: str, task) -> dict | None:
    """`input`'s splits, in order, when it is a prepared copy (a URL, or a folder with manifest.json); else None."""
    if not is_url(given) and not (Path(given).expanduser() / MANIFEST).is_file():
        return None
    if task_of(task).output == "pixels":  # a mask and an overlay an input: of the image files themselves
        raise DataError(f"input={given} is a prepared copy: predict with data.task=segmentation writes each input's "
                        "mask and overlay at the input's own size, from the images themselves; give input=<an image "
                        "file, or a folder of images>.")
    copy = prepared_source(PreparedDataConfig(path=given, task=task))
    return copy.splits()


def _input_files(given: str | None) -> tuple[Path, list[Path]]:
    if not given:
        raise ConfigError("config key `input` is missing: predict needs input=<image file or folder of images>.")
    try:
        source = Path(given).expanduser().resolve()
    except (RuntimeError, OSError):  # a link in a loop (Python 3.11 raises RuntimeError, later ones OSError)
        raise DataError(f"input {given} is a symbolic link in a loop: point it at an image or a folder of "
                        "images, or give the file it was meant for.") from None
    if not source.exists():
        raise DataError(f"input {source} does not exist: give input=<an image file, or a folder of images "
                        "(searched recursively)> that is there.")
    files = image_files(source)
    if not files:
        raise DataError(f"input {source} holds no image files (JPEG, PNG, WebP, BMP, TIFF).")
    return source, files


@hydra.main(config_path=str(conf_dir()), config_name="predict", version_base="1.3")
@failure_carried
def main(cfg: DictConfig) -> None:
    slide_rules.check(cfg.predict)  # the command's own keys, before any work
    # first: it picks the backend Keras loads on
    run_dir, config = open_run(cfg, safe=("queue.", "data.max_image_pixels", STORAGE))
    # before Keras loads: a wrong input is said at once
    prepared = _prepared_input(cfg.input, config.data.task) if cfg.input else None
    source, files = (cfg.input, []) if prepared else _input_files(cfg.input)
    from app.inference import restore  # the Keras side: it imports Keras, which open_run loaded on the run's backend

    restore.builder_imported(config.model)
    model_path = run_dir / "model.keras"
    net, meta = restore.load_model_keras(run_dir)
    names, size = meta["class_names"], meta["image_size"]
    splits = prepared or {"predict": FileSplit([str(f) for f in files], np.zeros(len(files), np.int64))}
    total = sum(len(split) for split in splits.values())
    log.info("predicting %d images from %s with %s", total, source, model_path)
    out = Path(HydraConfig.get().runtime.output_dir) / "predictions.csv"
    counts = np.zeros(len(names), np.int64)
    # Predict's own bad-file policy: a file that cannot be read is listed with its error and no
    # numbers (training's `skip` would put the next file's pixels, and so its answer, in its place).
    pixels = pixels_of(config.data.channels, meta.get("dtype", "uint8"), bands=int(net.input_shape[-1]))  # the model's
    settings = dataclasses.replace(Settings.of(config.data, loading_only(config.queue), pixels=pixels),
                                   image_size=tuple(size))  # the model's
    transforms = eval_transforms(config.augment, size)
    patches = None if prepared else run_patches(config.data)
    task = task_of(config.data.task)
    if patches is not None and task.output == "pixels":  # each slide whole, a pyramid of classes
        return _predict_slides(config, cfg.predict, (files, Path(source), out), (net, names, settings, transforms))
    if patches is not None:
        return _predict_patches(config, patches, (net, names, settings, transforms), (files, out))
    if task.output == "pixels":  # a mask an input (data.task=segmentation)
        return _predict_masks(config, splits["predict"], (net, names, settings, transforms), (Path(source), out))
    failed: list[tuple[str, str]] = []  # (what, why) of each sample that could not be read
    with build_loader(config, {name: (split, transforms) for name, split in splits.items()},
                      on_bad_sample="mark", settings=settings) as loader, \
            atomic_write(out, newline="", encoding="utf-8") as f:  # stopped midway: no half CSV
        rows = _Rows(writer=csv.writer(f), net=net, names=names, counts=counts, task=task,
                     cut=task.cut(cfg.thresholds, run_dir, names, config.trainer))
        rows.writer.writerow(["path", task.prediction_column, *names, "error"])
        for name, split in splits.items():
            failed += rows.write_split(loader, name, split.describe if prepared else lambda i: str(files[i]))
    read = total - len(failed)
    if read:
        print(f"{read} images: " + ", ".join(f"{n} {c}" for n, c in zip(names, counts, strict=True) if c))
    if failed:
        log.warning("%d of %d samples could not be read; each is listed in %s with its error and no prediction",
                    len(failed), total, out)
        print(f"{len(failed)} of {total} files could not be read: listed with their error, without numbers")
    print(f"written: {out}")
    if not read:
        first, why = failed[0]
        if not prepared and not Path(source).is_dir():
            raise DataError(f"{source} could not be read: {why}; see {out}.")
        where = f"samples of the prepared copy {source}" if prepared else f"files under {source}"
        raise DataError(f"none of the {total} {where} could be read (the first, {first}: {why}); see {out}.")


def _predict_masks(config, split, model: tuple, where: tuple[Path, Path]) -> None:
    """A mask, an overlay and a row of class shares an input (data.task=segmentation)."""
    (net, names, settings, transforms), (root, out) = model, where
    writer = pixel_predictions.MaskWriter(out.parent, names, root)
    with build_loader(config, {"predict": (split, transforms)}, on_bad_sample="mark", settings=settings) as loader:
        whole = Decode(None, config.data.max_image_pixels, settings.pixels)  # each input's own size, its pixels
        rows = pixel_predictions.predicted_rows(loader, split, net, writer, decode=whole)
    patch_scores.write_csv(out, ["path", "mask", *names, "error"], rows)
    failed = [row for row in rows if row[-1]]
    unread = f"; {len(failed)} unreadable, listed with why" if failed else ""
    print(f"{len(rows) - len(failed)} masks of {len(rows)} inputs{unread}")
    print(f"written: {out}, {out.parent / 'masks'}, {out.parent / 'overlays'}")
    if len(failed) == len(rows):
        raise DataError(f"none of the {len(rows)} inputs could be read (the first, {failed[0][0]}: {failed[0][-1]}); "
                        f"see {out}.")


def _predict_patches(config, patches, model: tuple, where: tuple[list[Path], Path]) -> None:
    """A patch run's predictions: a row an image (its patches' `aggregate`; none read: why), patches.csv, heatmaps."""
    (net, names, settings, transforms), (files, out) = model, where
    split, gone = grid_split([str(f) for f in files], patches)
    outputs, failed = _patch_outputs(config, split, (net, settings, transforms)) if len(split) else ([], {})
    rows = patch_scores.write_predictions(split, outputs, names=names, patches=patches, out=out.parent)
    predicted = {row["path"] for row in rows}
    for index, why in sorted(failed.items()):  # an image none of whose patches could be read: the first one's error
        path = split.images.paths[split.image_of[index]]
        if path not in predicted:
            gone.setdefault(path, f"no patch of it could be read (the first: {why})")
    patch_scores.write_csv(out, ["path", "class", *names, "patches", "heatmap", "error"], [
        *([row["path"], names[int(np.argmax(row["scores"]))], *(f"{v:.6f}" for v in row["scores"]), row["patches"],
           row["heatmap"], row.get("error", "")] for row in rows),
        *([path, "", *([""] * len(names)), 0, "", why] for path, why in gone.items())])
    print(f"{len(rows)} images from {sum(row['patches'] for row in rows)} patches "
          f"({patches.aggregate.value} of each image's){f'; {len(gone)} without any, listed with why' if gone else ''}")
    print(f"written: {out}, {out.parent / 'patches.csv'}, {out.parent / 'heatmaps'}")
    if not rows:
        first, why = next(iter(gone.items()))
        raise DataError(f"none of the {len(files)} images has a patch to predict (the first, {first}: {why}); see "
                        f"{out}.")


def _predict_slides(config, given, inputs: tuple, model: tuple) -> None:
    """A segmentation run's slides predicted whole: a pyramid of classes, an overlay and a row a slide."""
    out = inputs[2]
    header, *rows = slide_predictions.predict_to_files(config, given, inputs, model)
    patch_scores.write_csv(out, header, rows)
    failed = [row for row in rows if row[-1] and not row[1]]
    print(f"{len(rows) - len(failed)} slides predicted whole in {sum(int(row[3]) for row in rows)} tiles"
          f"{f'; {len(failed)} not, listed with why' if failed else ''}")
    print(f"written: {out}, {out.parent / 'masks'}, {out.parent / 'overlays'}")
    if len(failed) == len(rows):
        raise DataError(f"none of the {len(rows)} slides could be predicted (the first, {failed[0][0]}: "
                        f"{failed[0][-1]}); see {out}.")


def _patch_outputs(config, split, model: tuple) -> tuple[list, dict[int, str]]:
    """(positions, class scores) of each batch of `split`'s patches it could read, with a bar; the others' errors."""
    net, settings, transforms = model
    outputs = []
    with build_loader(config, {"predict": (split, transforms)}, on_bad_sample="mark", settings=settings) as loader, \
            tqdm(total=len(split), desc="predict", unit="patch", file=sys.stderr, delay=PROGRESS_AFTER_S,
                 leave=False, dynamic_ncols=True) as bar:
        for x, _, positions in loader.readable("predict"):
            stop_if_interrupted()
            outputs.append((positions, np.asarray(net.predict_on_batch(x), np.float64)))
            bar.update(int(positions[-1]) + 1 - bar.n)
        return outputs, dict(loader.failed("predict"))


@dataclass(kw_only=True)
class _Rows:
    """predictions.csv as it is written: the model, its class names, each class's count so far."""

    writer: object
    net: object
    names: list[str]
    counts: np.ndarray
    task: Task  # which classes a row names
    cut: np.ndarray | None = None  # the task's thresholds a class (several labels an image)

    def write_split(self, loader, name: str, what) -> list[tuple[str, str]]:
        """Writes a row per sample of split `name` (`what(i)`: its path); returns (what, why) of each unreadable one."""
        done, failed = 0, []
        for x, _ in loader.every_sample(name):
            stop_if_interrupted()
            probabilities = np.asarray(self.net.predict_on_batch(x))
            for index, p in enumerate(probabilities, start=done):
                error = loader.failed(name).get(index)
                if error is not None:
                    self.writer.writerow([what(index), "", *([""] * len(self.names)), error])
                    failed.append((what(index), error))
                    continue
                on = self.task.shown(p, self.cut)
                named = "|".join(name for name, shown in zip(self.names, on, strict=True) if shown)
                self.writer.writerow([what(index), named, *(f"{v:.6f}" for v in p), ""])
                self.counts += on
            done += len(x)
        return failed
