"""data.task=multiclass: one class an image, a softmax head; predict names the likeliest class, export agrees on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.augment import eval_transforms
from app.capacity.auto import loading_only
from app.data.pixels.pixels import run_pixels
from app.inference import scores
from app.io import write_file, write_json, write_picture
from app.loader.pipeline import build_loader
from app.loader.settings import Settings
from app.rules import top_k
from app.schema import TrainerConfig
from app.schema.data import Task as TaskName
from app.targets import targets_of
from app.tasks import class_report
from app.tasks.base import Evaluation, unreadable


class Classification:
    """One class an image (torchgeo's ClassificationTask, keras-hub's ImageClassifier)."""

    targets = targets_of(TaskName.multiclass)
    activation, monitor, prediction_column, parity_key = "softmax", "val_accuracy", "class", "top1_agreement"
    output, parity_words = "image", "top-1 agreement"

    def metric_names(self, trainer: TrainerConfig, class_names: list[str]) -> list[str]:
        k = top_k(trainer, len(class_names))
        return (["accuracy"] + ([f"top{k}_accuracy"] if k else [])
                + ([f"recall_{name}" for name in class_names] if trainer.per_class_recall else []))

    def objectives(self, trainer: TrainerConfig, class_names: list[str], weights=None, ignore_index=None) -> tuple:
        """Sparse crossentropy (smoothed where asked), accuracy, top-k, each class's recall."""
        import keras  # Keras waits: the commands ask the task before they load Keras on the run's backend

        from app.objectives import PerClassRecall, SmoothedSparseCrossentropy  # imports Keras: as above

        k = top_k(trainer, len(class_names))
        loss = (SmoothedSparseCrossentropy(trainer.label_smoothing) if trainer.label_smoothing else
                "sparse_categorical_crossentropy")
        metrics = ["accuracy"]
        if k:
            metrics.append(keras.metrics.SparseTopKCategoricalAccuracy(k, name=f"top{k}_accuracy"))
        if trainer.per_class_recall:
            metrics.append(PerClassRecall(class_names))
        return loss, metrics

    def weighed(self, weights: np.ndarray | None) -> tuple[None, np.ndarray | None]:
        """trainer.class_weight weighs each sample by its class, outside the loss."""
        return None, weights

    def evaluate(self, job: Evaluation) -> float:
        """Loss, accuracy, top-k, each class's figures and the confusion matrix; a patch run's images too."""
        config, split, names, out = job.config, job.split, job.source.class_names, job.out
        confusion = np.zeros((len(names), len(names)), np.int64)
        k = top_k(config.trainer, len(names))
        transforms = eval_transforms(config.augment, config.data.image_size)
        outputs = [] if split.patches is not None else None  # patches (of slides, or a patch copy's): images' too
        pixels = run_pixels(config.data, split)  # once: the loader's and misclassified.png's
        # Evaluate's own bad-file policy, whatever data.on_bad_sample the run trained with: a file that
        # cannot be read is left out and named (training's `skip` would score another file in its place).
        with build_loader(config, {job.split_name: (split, transforms)}, on_bad_sample="mark",
                          settings=Settings.of(config.data, loading_only(config.queue), pixels=pixels)) as loader:
            figures = scores.evaluate(job.net, loader.readable(job.split_name), confusion, top_k=k, outputs=outputs)
        left_out = unreadable(split, loader.failed(job.split_name), job.split_name)
        result = {"checkpoint": str(job.checkpoint), "split": job.split_name, "loss": figures.loss,
                  "accuracy": figures.accuracy, **({f"top{k}_accuracy": figures.top_k_correct / figures.images}
                                                   if k else {}),
                  "samples": int(figures.images), "class_names": names, **class_report.per_class(confusion, names),
                  "confusion": confusion.tolist(), "unreadable": left_out}
        if outputs is not None:
            patches = split.patches  # the data.patches its patches were cut by (a patch copy keeps its own)
            result["image_level"] = class_report.images_figures(split, outputs, patches, names=names, out=out)
        write_json(out / "evaluation.json", result)
        write_file(out / "report.txt", class_report.report(result))
        class_report.write_confusion_png(confusion, names, out / "confusion.png", result)
        if figures.mistakes:
            sheet = class_report.mistakes_sheet(config, split, figures.mistakes, names=names, pixels=pixels)
            write_picture(out / "misclassified.png", sheet.save)
        _print(result, confusion, len(split), out)
        return result["accuracy"]

    def cut(self, given: str | None, run_dir: Path, names: list[str], trainer: TrainerConfig) -> None:
        return None

    def shown(self, probabilities: np.ndarray, cut: None) -> np.ndarray:
        return np.arange(len(probabilities)) == probabilities.argmax()

    def export_output(self, run_dir: Path, names: list[str], trainer: TrainerConfig) -> dict:
        return {}

    def agreeing(self, theirs: np.ndarray, ours: np.ndarray, output: dict) -> float:
        """The samples whose top-1 class both name."""
        return float((theirs.argmax(axis=1) == ours.argmax(axis=1)).sum())


def _print(result: dict, confusion: np.ndarray, total: int, out: Path) -> None:
    names, split = result["class_names"], result["split"]
    print(f"checkpoint {Path(result['checkpoint']).name}: loss {result['loss']:.4f}, accuracy "
          f"{result['accuracy']:.4f} on {result['samples']} {split} samples\n")
    print(class_report.confusion_table(confusion, names))
    print(f"\n{class_report.report(result)}")
    if result["unreadable"]:
        print(f"{len(result['unreadable'])} of {total} {split} files could not be read and were left out "
              "(evaluation.json's `unreadable` lists each with its error)")
    print(f"written: {out / 'evaluation.json'}, {out / 'report.txt'}, {out / 'confusion.png'}, "
          f"{out / 'misclassified.png'}")
