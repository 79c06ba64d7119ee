"""data.task=multilabel: several classes an image, a sigmoid head; predict and export use evaluate's thresholds."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from app.augment import eval_transforms
from app.capacity.auto import loading_only
from app.errors import DataError
from app.inference import label_scores
from app.inference.thresholds import checkpoints_apart, read_thresholds
from app.io import write_file, write_json, write_json_over_own
from app.loader.pipeline import build_loader
from app.schema import TrainerConfig
from app.schema.data import Task as TaskName
from app.targets import targets_of
from app.tasks.base import Evaluation, unreadable

log = logging.getLogger("app.predict")


class MultiLabel:
    """Several classes an image, none too (torchgeo's MultiLabelClassificationTask)."""

    targets = targets_of(TaskName.multilabel)
    activation, monitor, prediction_column, parity_key = "sigmoid", "val_auc", "labels", "label_agreement"
    output, parity_words = "image", "labels agreeing at their thresholds"

    def metric_names(self, trainer: TrainerConfig, class_names: list[str]) -> list[str]:
        return ["auc", "map", "precision", "recall", *(f"f1_{name}" for name in class_names), "macro_precision",
                "macro_recall"]

    def objectives(self, trainer: TrainerConfig, class_names: list[str], weights=None, ignore_index=None) -> tuple:
        """Weighted binary crossentropy; macro AUC, mAP, micro precision and recall at threshold, each class's F1."""
        import keras  # Keras waits: the commands ask the task before they load Keras on the run's backend

        from app import objectives  # imports Keras: as above

        t, n = trainer.threshold, len(class_names)
        loss = objectives.WeightedBinaryCrossentropy(weights, trainer.label_smoothing)
        return loss, [objectives.MacroAUC(n), objectives.MeanAveragePrecision(n),
                      keras.metrics.Precision(thresholds=t, name="precision"),
                      keras.metrics.Recall(thresholds=t, name="recall"),
                      objectives.PerClassF1(class_names, t)]

    def weighed(self, weights: np.ndarray | None) -> tuple[np.ndarray | None, None]:
        """trainer.class_weight weighs each class's positives, in the loss."""
        return weights, None

    def evaluate(self, job: Evaluation) -> float:
        """The figures on the split at each class's best-F1 threshold on val (written to thresholds.json)."""
        config, names, run_dir = job.config, job.source.class_names, job.run_dir
        transforms, queue = eval_transforms(config.augment, config.data.image_size), loading_only(config.queue)

        def pass_over(name: str, split) -> tuple:
            with build_loader(config, {name: (split, transforms)}, queue=queue, on_bad_sample="mark") as loader:
                truth, scores = label_scores.outputs(job.net, loader.readable(name))
            return truth, scores, unreadable(split, loader.failed(name), name)

        val = pass_over("val", job.source.val)
        thresholds = label_scores.best_thresholds(val[0], val[1], config.trainer.threshold)
        write_json_over_own(run_dir / "thresholds.json", {"split": "val", "checkpoint": str(job.checkpoint),
                            "thresholds": dict(zip(names, thresholds, strict=True))}, "evaluate")
        truth, scores, left_out = val if job.split_name == "val" else pass_over(job.split_name, job.split)
        result = {"checkpoint": str(job.checkpoint), "split": job.split_name, "task": self.targets.task.value,
                  "samples": len(truth), "class_names": names,
                  **label_scores.table(truth, scores, names, thresholds), "unreadable": left_out}
        write_json(job.out / "evaluation.json", result)
        text = label_scores.report(result)
        write_file(job.out / "report.txt", text + "\n")
        undefined = " (-: no class has both a positive and a negative there)" if result["auc"] is None else ""
        print(f"checkpoint {job.checkpoint.name}: loss {result['loss']:.4f}, macro AUC "
              f"{label_scores.figure(result['auc'])}, mean average precision "
              f"{label_scores.figure(result['mean_average_precision'])} on {len(truth)} {job.split_name} samples"
              f"{undefined} (thresholds from val: {run_dir / 'thresholds.json'})\n\n{text}")
        print(f"written: {job.out / 'evaluation.json'}, {job.out / 'report.txt'}, {run_dir / 'thresholds.json'}")
        return result["auc"]

    def cut(self, given: str | None, run_dir: Path, names: list[str], trainer: TrainerConfig) -> np.ndarray:
        """Each class's threshold: thresholds=, else the run's thresholds.json for model.keras, else the trainer's."""
        path = Path(given).expanduser() if given else run_dir / "thresholds.json"
        every = np.full(len(names), trainer.threshold)
        if not given and not path.exists():
            log.info("thresholds: trainer.threshold=%g for every class (evaluate writes per-class ones)",
                     trainer.threshold)
            return every
        saved = read_thresholds(path, run_dir, given)
        found = saved.get("thresholds", {})
        missing = [name for name in names if name not in found]
        if missing:
            raise DataError(f"{path} has no threshold for {', '.join(missing)}: it is another run's; evaluate this "
                            "one")
        apart = checkpoints_apart(saved, path, run_dir)
        if apart:  # thresholds fit one model's scores, not another's
            log.warning("thresholds: %s holds those evaluate picked for checkpoint %s, where predict scores "
                        "model.keras, which is checkpoint %s (the run's best): %s", path, *apart,
                        "used, as thresholds= asks" if given else f"not used; trainer.threshold={trainer.threshold:g} "
                        f"for every class instead. `python -m app evaluate resume={run_dir} checkpoint=best` picks "
                        f"them for model.keras (thresholds={path} uses these anyway)")
            if not given:
                return every
        log.info("thresholds: %s", path)
        return np.array([float(found[name]) for name in names])

    def shown(self, probabilities: np.ndarray, cut: np.ndarray) -> np.ndarray:
        return probabilities >= cut

    def export_output(self, run_dir: Path, names: list[str], trainer: TrainerConfig) -> dict:
        """preprocessing.json's output: sigmoid, with thresholds.json's (else trainer.threshold) a class."""
        path = run_dir / "thresholds.json"
        found = read_thresholds(path, run_dir).get("thresholds", {}) if path.exists() else {}
        return {"task": self.targets.task.value,
                "output": "each class's probability (sigmoid, float32), in labels.txt's order: the image shows a "
                          "class where it is at or above that class's threshold",
                "thresholds": {name: float(found.get(name, trainer.threshold)) for name in names},
                "thresholds_from": str(path) if found else f"trainer.threshold={trainer.threshold:g}"}

    def agreeing(self, theirs: np.ndarray, ours: np.ndarray, output: dict) -> float:
        """A sample's share of classes decided alike at their thresholds, summed over the samples."""
        cut = np.array(list(output["thresholds"].values()), np.float32)
        return float(((theirs >= cut) == (ours >= cut)).mean(axis=1).sum())
