"""data.task=segmentation: a class a pixel, a softmax a pixel; evaluate scores pixels (IoU, Dice) and each image."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.augment import eval_transforms
from app.capacity.auto import loading_only
from app.data.slides.patches import PatchSplit
from app.inference.slide_predictions import slide_confusions
from app.io import write_file, write_json
from app.loader.pipeline import build_loader
from app.measures import pixel_confusion, segmentation_scores
from app.processes import stop_if_interrupted
from app.schema import TrainerConfig
from app.schema.data import Task as TaskName
from app.targets import targets_of
from app.tasks import pixel_report
from app.tasks.base import Evaluation, unreadable


class Segmentation:
    """A class a pixel (torchgeo's SemanticSegmentationTask): ignore_index counts in no loss and no metric."""

    targets = targets_of(TaskName.segmentation)
    activation, monitor, prediction_column, parity_key = "softmax", "val_miou", "mask", "pixel_agreement"
    output, parity_words = "pixels", "share of pixels whose class agrees"

    def metric_names(self, trainer: TrainerConfig, class_names: list[str]) -> list[str]:
        return ["miou", *(f"iou_{name}" for name in class_names), "dice", "pixel_accuracy"]

    def objectives(self, trainer: TrainerConfig, class_names: list[str], weights=None, ignore_index=None) -> tuple:
        """trainer.loss (crossentropy, dice or their sum) over the pixels not ignored; IoU, Dice, pixel accuracy."""
        from app.pixel_objectives import PixelLoss, PixelScores  # imports Keras: the commands ask first

        weights = None if weights is None else [float(w) for w in weights]
        loss = PixelLoss(len(class_names), kind=trainer.loss, ignore_index=ignore_index, class_weights=weights)
        return loss, [PixelScores(class_names, ignore_index)]

    def weighed(self, weights: np.ndarray | None) -> tuple[np.ndarray | None, None]:
        """trainer.class_weight weighs each class's pixels, in the loss."""
        return weights, None

    def evaluate(self, job: Evaluation) -> float:
        """The pixel confusion matrix and its figures a class, each image's IoU (images.csv, the worst first); patches
        of slides: each slide predicted whole, as predict does, and scored against its annotation."""
        if isinstance(job.split, PatchSplit):  # slides' own patches; a patch copy's are scored as stored
            return self._evaluate_slides(job)
        config, split, names = job.config, job.split, job.source.class_names
        ignore, transforms = config.data.ignore_index, eval_transforms(config.augment, config.data.image_size)
        confusion, images = np.zeros((len(names), len(names)), np.int64), []
        with build_loader(config, {job.split_name: (split, transforms)}, queue=loading_only(config.queue),
                          on_bad_sample="mark") as loader:
            for x, masks, positions in loader.readable(job.split_name):
                stop_if_interrupted()
                predicted = np.asarray(job.net.predict_on_batch(x)).argmax(axis=-1)
                for mask, guess, position in zip(masks, predicted, positions, strict=True):
                    own = pixel_confusion(mask, guess, len(names), ignore)
                    confusion += own
                    images.append((split.describe(int(position)), segmentation_scores(own)))
            left_out = unreadable(split, loader.failed(job.split_name), job.split_name)
        result = {"checkpoint": str(job.checkpoint), "split": job.split_name, "task": self.targets.task.value,
                  "samples": len(images), "class_names": names, "ignore_index": ignore,
                  **pixel_report.json_ready(segmentation_scores(confusion)), "confusion": confusion.tolist(),
                  "unreadable": left_out}
        return _written(job, result, images, "images")

    def _evaluate_slides(self, job: Evaluation) -> float:
        """Each validation slide predicted whole and scored against its annotation: its figures, and all slides'."""
        config, names, size = job.config, job.source.class_names, len(job.source.class_names)
        transforms = eval_transforms(config.augment, config.data.image_size)
        slides = slide_confusions(config, job.split, (job.net, transforms), job.slides)
        total, images = np.zeros((size, size + 1), np.int64), []
        for path, confusion in slides:
            if isinstance(confusion, str):
                images.append((path, {"mean_iou": float("nan"), "mean_dice": float("nan"),
                                      "pixel_accuracy": float("nan")}))
                continue
            total += confusion
            images.append((path, segmentation_scores(confusion[:, :size])))
        result = {"checkpoint": str(job.checkpoint), "split": job.split_name, "task": self.targets.task.value,
                  "samples": len(slides), "scored": "each slide whole, as predict writes it", "class_names": names,
                  "ignore_index": config.data.ignore_index,
                  **pixel_report.json_ready(segmentation_scores(total[:, :size])),
                  "confusion": total[:, :size].tolist(), "not_predicted": total[:, size].tolist(),
                  "slides": [{"path": path, **pixel_report.json_ready(scores)} for path, scores in images],
                  "unreadable": [{"path": path, "error": why} for path, why in slides if isinstance(why, str)]}
        return _written(job, result, images, "slides")


    def cut(self, given: str | None, run_dir: Path, names: list[str], trainer: TrainerConfig) -> None:
        return None

    def shown(self, probabilities: np.ndarray, cut: None) -> np.ndarray:
        """Each pixel's class: the likeliest."""
        return probabilities.argmax(axis=-1)

    def export_output(self, run_dir: Path, names: list[str], trainer: TrainerConfig) -> dict:
        return {"task": self.targets.task.value,
                "output": "each pixel's class probabilities (softmax, float32), shape (batch, H, W, classes) in "
                          "labels.txt's order: a pixel's class is the likeliest"}

    def agreeing(self, theirs: np.ndarray, ours: np.ndarray, output: dict) -> float:
        """An image's share of pixels whose likeliest class agrees, summed over the images."""
        alike = theirs.argmax(axis=-1) == ours.argmax(axis=-1)
        return float(alike.reshape(len(alike), -1).mean(axis=1).sum())


def _written(job: Evaluation, result: dict, images: list, unit: str) -> float:
    """evaluation.json, report.txt and images.csv (a row an image, or a slide), the figures printed."""
    write_json(job.out / "evaluation.json", result)
    pixel_report.write_images_csv(images, job.out / "images.csv")
    text = pixel_report.report(result)
    write_file(job.out / "report.txt", text + "\n")
    print(f"checkpoint {job.checkpoint.name}: mean IoU {pixel_report.figure(result['mean_iou'])}, mean Dice "
          f"{pixel_report.figure(result['mean_dice'])}, pixel accuracy "
          f"{pixel_report.figure(result['pixel_accuracy'])} on {len(images)} {job.split_name} {unit}\n\n{text}")
    print(f"written: {job.out / 'evaluation.json'}, {job.out / 'report.txt'}, {job.out / 'images.csv'}")
    return result["mean_iou"]
