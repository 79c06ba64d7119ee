"""`python -m app evaluate resume=<run dir> [split=val|test] [checkpoint=last|best|<name>]`: a checkpoint of the run on
its validation or the data's test split: loss, accuracy, top-k, per-class precision, recall and F1 (evaluation.json,
report.txt), the confusion matrix and the most confident mistakes (PNGs), into <run dir>/evaluate/<date>_<time>/."""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.augment import Augmenter, eval_transforms
from app.commands import failure_carried
from app.config import conf_dir
from app.data.decode import Pixels
from app.data.pixels import run_pixels
from app.errors import DataError, config_error
from app.inference import patch_scores
from app.inference.opened import keras_for_run
from app.io import write_file, write_json, write_json_over_own, write_picture
from app.loader.pipeline import build_loader, make_sample
from app.loader.settings import Settings
from app.rules import top_k
from app.runs.rundata import checked_source
from app.runs.saved import STORAGE, read_run_setting_backend
from app.schema import register
from app.sheets import grid, rgb_view
from app.tracking.mlflow_writer import log_evaluation

register()
log = logging.getLogger("app.evaluate")


@hydra.main(config_path=str(conf_dir()), config_name="evaluate", version_base="1.3")
@failure_carried
def main(cfg: DictConfig) -> float:
    # first: it picks the backend Keras loads on
    run_dir, config = read_run_setting_backend(cfg, safe=("queue.", "augment.eval_", "data.max_image_pixels",
                                                          "data.test_path", STORAGE))
    source = checked_source(config, run_dir)  # before Keras loads: a refusal comes at once
    split = {"val": source.val, "test": source.test}.get(cfg.split)
    if split is None:
        raise config_error("split", cfg.split, "val, or test where the data has a test split (data=folder: "
                           "<path>/test/<class>/ beside train/ and val/, or data.test_path; data=table: `test` rows "
                           "in its split column, or data.test_fraction); this run's has none"
                           if cfg.split == "test" else "val or test")
    keras_for_run()
    from app.inference import label_scores, restore, scores  # the Keras side: Keras loaded just now (its backend)

    out = Path(HydraConfig.get().runtime.output_dir)
    restore.builder_imported(config.model)
    path, net = restore.chosen_checkpoint(run_dir, cfg.checkpoint)
    names = source.class_names
    log.info("evaluating %s on %d %s samples of %s (Keras on %s, one device)", path, len(split), cfg.split,
             source.name, config.trainer.backend.value)
    if np.ndim(source.train.labels) == 2:  # several labels an image
        return _several(config, (net, label_scores), source, cfg.split, paths=(run_dir, path, out))
    confusion = np.zeros((len(names), len(names)), np.int64)
    k = top_k(config.trainer, len(names))
    transforms = eval_transforms(config.augment, config.data.image_size)
    # Evaluate's own bad-file policy, whatever data.on_bad_sample the run trained with: a file that
    # cannot be read is left out and named (training's `skip` would score another file in its place).
    outputs = [] if hasattr(split, "image_of") else None  # patches (of slides, or a patch copy's): images' too
    pixels = run_pixels(config.data, split)  # once: the loader's and misclassified.png's
    with build_loader(config, {cfg.split: (split, transforms)}, on_bad_sample="mark",
                      settings=Settings.from_config(config, pixels=pixels)) as loader:
        figures = scores.evaluate(net, loader.readable(cfg.split), confusion, top_k=k, outputs=outputs)
    unreadable = _unreadable(split, loader.failed(cfg.split), cfg.split)
    result = {"checkpoint": str(path), "split": cfg.split, "loss": figures.loss, "accuracy": figures.accuracy,
              **({f"top{k}_accuracy": figures.top_k_correct / figures.images} if k else {}),
              "samples": int(figures.images), "class_names": names, **per_class(confusion, names),
              "confusion": confusion.tolist(), "unreadable": unreadable}
    if outputs is not None:
        patches = getattr(split, "settings", None) or config.data.patches  # a patch copy keeps its own
        result["image_level"] = _images(split, outputs, patches, names=names, out=out)
    write_json(out / "evaluation.json", result)
    write_file(out / "report.txt", report(result))
    _plot(confusion, names, out / "confusion.png", result)
    if figures.mistakes:
        sheet = _mistakes(config, split, figures.mistakes, names=names, pixels=pixels)
        write_picture(out / "misclassified.png", sheet.save)
    if config.logger.mlflow is not None:  # the confusion matrix and the rest, beside the run's own
        log_evaluation(run_dir, out)
    print(f"checkpoint {path.name}: loss {result['loss']:.4f}, accuracy {result['accuracy']:.4f} "
          f"on {result['samples']} {cfg.split} samples\n")
    print(_table(confusion, names))
    print(f"\n{report(result)}")
    if unreadable:
        print(f"{len(unreadable)} of {len(split)} {cfg.split} files could not be read and were left out "
              "(evaluation.json's `unreadable` lists each with its error)")
    print(f"written: {out / 'evaluation.json'}, {out / 'report.txt'}, {out / 'confusion.png'}, "
          f"{out / 'misclassified.png'}")
    return result["accuracy"]


def _images(split, outputs: list, patches, *, names: list[str], out: Path) -> dict:
    """A patch run's image-level figures (data.patches.aggregate of each image's patches) and images.csv."""
    rows = patch_scores.by_image(split, outputs, patches)
    patch_scores.write_csv(out / "images.csv", ["path", "label", "predicted", "patches", *names],
                           ([row["path"], names[row["label"]], names[int(np.argmax(row["scores"]))], row["patches"],
                             *(f"{v:.6f}" for v in row["scores"])] for row in rows))
    figures = {"aggregate": patches.aggregate.value, **patch_scores.image_figures(rows, names)}
    print(f"images: accuracy {figures['accuracy']:.4f} on {figures['images']} images "
          f"({patches.aggregate.value} of each image's patches; images.csv)")
    return figures


def _several(config, scoring: tuple, source, split_name: str, paths: tuple[Path, Path, Path]) -> float:
    """A multilabel run's figures on `split_name` at each class's best-F1 threshold on val; its macro AUC."""
    (net, label_scores), (run_dir, checkpoint, out), names = scoring, paths, source.class_names
    transforms = eval_transforms(config.augment, config.data.image_size)

    def pass_over(name: str, split) -> tuple:
        with build_loader(config, {name: (split, transforms)}, on_bad_sample="mark") as loader:
            truth, scores = label_scores.outputs(net, loader.readable(name))
        return truth, scores, _unreadable(split, loader.failed(name), name)

    val = pass_over("val", source.val)
    thresholds = label_scores.best_thresholds(val[0], val[1], config.trainer.threshold)
    write_json_over_own(run_dir / "thresholds.json", {"split": "val", "checkpoint": str(checkpoint), "thresholds":
                        dict(zip(names, thresholds, strict=True))}, "evaluate")
    truth, scores, unreadable = val if split_name == "val" else pass_over(split_name, source.test)
    result = {"checkpoint": str(checkpoint), "split": split_name, "task": "multilabel", "samples": len(truth),
              "class_names": names, **label_scores.table(truth, scores, names, thresholds), "unreadable": unreadable}
    write_json(out / "evaluation.json", result)
    text = label_scores.report(result)
    write_file(out / "report.txt", text + "\n")
    undefined = " (-: no class has both a positive and a negative there)" if result["auc"] is None else ""
    print(f"checkpoint {checkpoint.name}: loss {result['loss']:.4f}, macro AUC {label_scores.figure(result['auc'])}, "
          f"mean average precision {label_scores.figure(result['mean_average_precision'])} on {len(truth)} "
          f"{split_name} samples{undefined} (thresholds from val: {run_dir / 'thresholds.json'})\n\n{text}")
    print(f"written: {out / 'evaluation.json'}, {out / 'report.txt'}, {run_dir / 'thresholds.json'}")
    return result["auc"]


def _unreadable(split, failed: dict[int, str], split_name: str) -> list[dict]:
    """The files left out, each with its error; none readable at all is an error."""
    left_out = [{"path": split.describe(i), "error": failed[i]} for i in sorted(failed)]
    for row in left_out:
        log.warning("left out of the %s split: %s (%s)", split_name, row["path"], row["error"])
    if left_out and len(left_out) == len(split):
        first = left_out[0]
        raise DataError(f"none of the {len(split)} files of the {split_name} split could be read (the first, "
                        f"{first['path']}: {first['error']}): fix or replace them, then run evaluate again.")
    return left_out


def per_class(confusion: np.ndarray, names: list[str]) -> dict:
    """Each class's precision, recall and F1 from `confusion` (rows true), with macro and support-weighted averages."""
    hits, support, predicted = np.diag(confusion), confusion.sum(axis=1), confusion.sum(axis=0)
    precision = np.divide(hits, predicted, out=np.zeros(len(names)), where=predicted > 0)
    recall = np.divide(hits, support, out=np.zeros(len(names)), where=support > 0)
    f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros(len(names)),
                   where=precision + recall > 0)
    weights = support / max(support.sum(), 1)
    classes = {name: {"precision": float(precision[i]), "recall": float(recall[i]), "f1": float(f1[i]),
                      "support": int(support[i])} for i, name in enumerate(names)}
    return {"per_class": classes,
            "macro": {"precision": float(precision.mean()), "recall": float(recall.mean()), "f1": float(f1.mean())},
            "weighted": {"precision": float(precision @ weights), "recall": float(recall @ weights),
                         "f1": float(f1 @ weights)}}


def report(result: dict) -> str:
    """report.txt: the figures and a table a class."""
    width = max(12, *(len(n) for n in result["class_names"]))
    lines = [f"checkpoint {result['checkpoint']}", f"split {result['split']}: {result['samples']} samples",
             f"loss {result['loss']:.4f}", f"accuracy {result['accuracy']:.4f}"]
    if "image_level" in result:  # a patch run: the figures above are its patches'
        images = result["image_level"]
        lines.append(f"images: accuracy {images['accuracy']:.4f} on {images['images']} ({images['aggregate']})")
    lines += [f"{key} {value:.4f}" for key, value in result.items() if key.startswith("top")]
    lines += ["", f"{'class'.ljust(width)} precision    recall        f1   support"]
    rows = [*result["per_class"].items(), ("macro avg", result["macro"]), ("weighted avg", result["weighted"])]
    for name, row in rows:
        support = row.get("support", result["samples"])
        lines.append(f"{name[:width].ljust(width)} {row['precision']:9.4f} {row['recall']:9.4f} {row['f1']:9.4f} "
                     f"{support:9d}")
    return "\n".join(lines) + "\n"


def _mistakes(config, split, mistakes: list, names: list[str], pixels: Pixels):
    """misclassified.png's sheet: the most confident mistakes as the model saw them, captioned true, predicted, p."""
    resize = Augmenter(eval_transforms(config.augment, config.data.image_size), config.data.image_size,
                       draft=config.data.decode.draft, max_pixels=config.data.max_image_pixels, pixels=pixels)
    images = np.stack([make_sample(split, resize, index, seed=config.seed, epoch=0) for _, index, _, _ in mistakes])
    captions = [f"true {names[t]}\npred {names[p]}\np {prob:.2f}" for prob, _, t, p in mistakes]
    return grid(list(rgb_view(images)), captions, columns=4)  # several bands or 16 bits: seen as RGB


def _table(confusion: np.ndarray, names: list[str]) -> str:
    width = max(8, *(len(n) for n in names))
    head = "true \\ predicted".ljust(width) + "".join(n[:width].rjust(width + 1) for n in names)
    rows = [n.ljust(width) + "".join(str(v).rjust(width + 1) for v in row)
            for n, row in zip(names, confusion, strict=True)]
    return "\n".join([head, *rows])


def _plot(confusion: np.ndarray, names: list[str], path: Path, result: dict) -> None:
    import matplotlib  # a second to load: only the plot needs it, after the scores

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(4.0, 0.6 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(confusion, cmap="Blues")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"accuracy {result['accuracy']:.3f} on {result['samples']} samples")
    for (i, j), value in np.ndenumerate(confusion):
        ax.text(j, i, str(value), ha="center", va="center",
                color="white" if value > confusion.max() / 2 else "black")
    fig.tight_layout()
    write_picture(path, fig.savefig, dpi=100)
    plt.close(fig)
