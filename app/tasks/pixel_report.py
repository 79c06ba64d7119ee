"""data.task=segmentation's `evaluate` files: each class's figures as text, images.csv (the worst image first)."""

from __future__ import annotations

import math
from pathlib import Path

from app.inference.patch_scores import write_csv

FIGURES = ("iou", "dice", "precision", "recall")


def defined(value: float | None) -> float | None:
    """NaN (a class neither true nor predicted anywhere) as None: JSON has no NaN."""
    return None if value is None or math.isnan(value) else value


def json_ready(scores: dict) -> dict:
    """segmentation_scores' figures with NaN as None."""
    return {key: [defined(v) for v in value] if isinstance(value, list) else defined(value)
            for key, value in scores.items()}


def write_images_csv(images: list[tuple[str, dict]], path: Path) -> None:
    """A row an image: its mean IoU and pixel accuracy, the worst first (an image with no scored pixel last)."""
    def worst_first(row):
        iou = row[1]["mean_iou"]
        return (math.isnan(iou), iou if not math.isnan(iou) else 0.0)

    write_csv(path, ["path", "mean_iou", "mean_dice", "pixel_accuracy"],
              ([where, *(_shown(scores[key]) for key in ("mean_iou", "mean_dice", "pixel_accuracy"))]
               for where, scores in sorted(images, key=worst_first)))


def _shown(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.6f}"


def report(result: dict) -> str:
    """Each class's IoU, Dice, precision, recall and true pixels, the means, and the pixel confusion matrix."""
    names, confusion = result["class_names"], result["confusion"]
    missed = result.get("not_predicted") or [0] * len(names)  # a slide's pixels no tile reached: of no class
    width = max(12, *(len(n) for n in names))
    lines = [f"{'class':<{width}} {'iou':>8} {'dice':>8} {'precision':>10} {'recall':>8} {'pixels':>12}"]
    for i, name in enumerate(names):
        cells = [figure(result[key][i]) for key in FIGURES]
        lines.append(f"{name:<{width}} {cells[0]:>8} {cells[1]:>8} {cells[2]:>10} {cells[3]:>8} "
                     f"{sum(confusion[i]) + missed[i]:>12}")
    lines.append(f"{'mean':<{width}} {figure(result['mean_iou']):>8} {figure(result['mean_dice']):>8} "
                 f"{figure(result['mean_precision']):>10} {figure(result['mean_recall']):>8}")
    lines += ["", f"pixel accuracy {figure(result['pixel_accuracy'])} (pixels of data.ignore_index "
              f"{result['ignore_index']} left out)" if result["ignore_index"] is not None else
              f"pixel accuracy {figure(result['pixel_accuracy'])}", "",
              "pixels by true class (rows) and predicted class (columns):",
              " " * width + "".join(f" {name[:10]:>10}" for name in names) + (" " * 4 + "no tile" if
                                                                                    "not_predicted" in result else "")]
    lines += [f"{name:<{width}}" + "".join(f" {count:>10}" for count in row) + (
        f" {missed[i]:>10}" if "not_predicted" in result else "") for i, (name, row) in enumerate(zip(
            names, confusion, strict=True))]
    return "\n".join(lines)


def figure(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"
