"""data.task=multiclass's `evaluate` files: per-class figures, report.txt, the confusion matrix printed and drawn."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.augment import Augmenter, eval_transforms
from app.data.pixels.decode import Pixels
from app.inference import patch_scores
from app.io import write_picture
from app.loader.pipeline import make_sample
from app.sheets import grid, rgb_view


def images_figures(split, outputs: list, patches, *, names: list[str], out: Path) -> dict:
    """A patch run's image-level figures (data.patches.aggregate of each image's patches) and images.csv."""
    rows = patch_scores.by_image(split, outputs, patches)
    patch_scores.write_csv(out / "images.csv", ["path", "label", "predicted", "patches", *names],
                           ([row["path"], names[row["label"]], names[int(np.argmax(row["scores"]))], row["patches"],
                             *(f"{v:.6f}" for v in row["scores"])] for row in rows))
    figures = {"aggregate": patches.aggregate.value, **patch_scores.image_figures(rows, names)}
    print(f"images: accuracy {figures['accuracy']:.4f} on {figures['images']} images "
          f"({patches.aggregate.value} of each image's patches; images.csv)")
    return figures


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


def mistakes_sheet(config, split, mistakes: list, names: list[str], pixels: Pixels):
    """misclassified.png's sheet: the most confident mistakes as the model saw them, captioned true, predicted, p."""
    resize = Augmenter(eval_transforms(config.augment, config.data.image_size), config.data.image_size,
                       draft=config.data.decode.draft, max_pixels=config.data.max_image_pixels, pixels=pixels)
    images = np.stack([make_sample(split, resize, index, seed=config.seed, epoch=0) for _, index, _, _ in mistakes])
    captions = [f"true {names[t]}\npred {names[p]}\np {prob:.2f}" for prob, _, t, p in mistakes]
    return grid(list(rgb_view(images)), captions, columns=4)  # several bands or 16 bits: seen as RGB


def confusion_table(confusion: np.ndarray, names: list[str]) -> str:
    width = max(8, *(len(n) for n in names))
    head = "true \\ predicted".ljust(width) + "".join(n[:width].rjust(width + 1) for n in names)
    rows = [n.ljust(width) + "".join(str(v).rjust(width + 1) for v in row)
            for n, row in zip(names, confusion, strict=True)]
    return "\n".join([head, *rows])


def write_confusion_png(confusion: np.ndarray, names: list[str], path: Path, result: dict) -> None:
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
