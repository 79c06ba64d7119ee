"""What Keras's metrics (app/objectives.py) and evaluate's NumPy (app/inference/) share, without a framework."""

from __future__ import annotations

import numpy as np

EPSILON = 1e-7  # keras.backend.epsilon(): Keras's crossentropy clips probabilities to [ε, 1 − ε]


def mean_average_precision(truth: np.ndarray, scores: np.ndarray) -> float:
    """Mean over classes with a positive of Σ (R_k − R_{k−1})·P_k, ties together, as scikit-learn's; NaN with none."""
    found = []
    for c in range(truth.shape[1]):
        positives = truth[:, c].astype(bool)
        if not positives.any():
            continue  # undefined: no positive to recall
        order = np.argsort(-scores[:, c], kind="stable")
        ranked, hits = scores[order, c], positives[order]
        last = np.r_[np.nonzero(np.diff(ranked))[0], len(ranked) - 1]  # the last of each run of tied scores
        tp = np.cumsum(hits)[last]
        precision, recall = tp / (last + 1), tp / positives.sum()
        found.append(float(np.sum(np.diff(np.r_[0.0, recall]) * precision)))
    return float(np.mean(found)) if found else float("nan")


def pixel_confusion(truth: np.ndarray, predicted: np.ndarray, classes: int,
                    ignore_index: int | None = None) -> np.ndarray:
    """Pixels counted by (true, predicted) class, classes × classes; those true as `ignore_index` left out."""
    truth, predicted = np.asarray(truth).ravel(), np.asarray(predicted).ravel()
    if truth.shape != predicted.shape:
        raise ValueError(f"{truth.size} true pixels against {predicted.size} predicted")
    if ignore_index is not None:
        kept = truth != ignore_index
        truth, predicted = truth[kept], predicted[kept]
    truth, predicted = truth.astype(np.int64), predicted.astype(np.int64)
    for name, values in (("true", truth), ("predicted", predicted)):
        if values.size and (values.min() < 0 or values.max() >= classes):
            wrong = values[(values < 0) | (values >= classes)][0]
            raise ValueError(f"a {name} pixel is {wrong}: neither one of the {classes} classes nor the ignore index")
    return np.bincount(truth * classes + predicted, minlength=classes * classes).reshape(classes, classes)


def segmentation_scores(confusion: np.ndarray) -> dict:
    """IoU, Dice, precision, recall a class (NaN where undefined), their means over the defined, and pixel accuracy."""
    confusion = np.asarray(confusion, np.float64)
    hits = np.diag(confusion)
    true, predicted = confusion.sum(axis=1), confusion.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        each = {"iou": hits / (true + predicted - hits), "dice": 2 * hits / (true + predicted),
                "precision": hits / predicted, "recall": hits / true}
    means = {f"mean_{name}": float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")
             for name, values in each.items()}
    total = confusion.sum()
    return {**{name: values.tolist() for name, values in each.items()}, **means,
            "pixel_accuracy": float(hits.sum() / total) if total else float("nan")}
