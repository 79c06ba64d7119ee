"""data.task=multilabel: `evaluate`'s per-class table, and each class's F1-best threshold (found on val, never test)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from app.measures import EPSILON, mean_average_precision
from app.processes import stop_if_interrupted


def outputs(net, batches: Iterable[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """(0/1 truth, probabilities), a row a sample, over batches of (images, label vectors[, positions])."""
    truth, scores = [], []
    for x, y, *_ in batches:
        stop_if_interrupted()
        truth.append(np.asarray(y, np.uint8))
        scores.append(np.asarray(net.predict_on_batch(x), np.float64))
    return np.concatenate(truth), np.concatenate(scores)


def roc_auc(truth: np.ndarray, scores: np.ndarray) -> float | None:
    """The chance a positive scores above a negative (ties half): the Mann-Whitney form; None with one kind only."""
    positives, negatives = scores[truth == 1], scores[truth == 0]
    if not len(positives) or not len(negatives):
        return None
    ranks = _ranks(np.concatenate([positives, negatives]))
    return float((ranks[:len(positives)].sum() - len(positives) * (len(positives) + 1) / 2)
                 / (len(positives) * len(negatives)))


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, tied values sharing their mean rank."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    start = 0
    for end in np.r_[np.nonzero(np.diff(sorted_values))[0] + 1, len(values)]:
        ranks[order[start:end]] = (start + end + 1) / 2
        start = end
    return ranks


def best_thresholds(truth: np.ndarray, scores: np.ndarray, default: float) -> list[float]:
    """Each class's F1-best threshold (`default` with no positive), midway to the next score below (rounding-proof)."""
    found = []
    for c in range(truth.shape[1]):
        positives = truth[:, c] == 1
        if not positives.any():
            found.append(default)
            continue
        candidates = np.unique(scores[:, c])
        f1 = [2 * np.sum(positives & (scores[:, c] >= t)) / (positives.sum() + np.sum(scores[:, c] >= t))
              for t in candidates]
        best = int(np.argmax(f1))
        found.append(float((candidates[best] + (candidates[best - 1] if best else 0.0)) / 2))
    return found


def table(truth: np.ndarray, scores: np.ndarray, names: list[str], thresholds: list[float]) -> dict:
    """evaluation.json's figures: the loss, each class's row, the macro and micro averages, mean average precision."""
    predicted = scores >= np.asarray(thresholds)
    rows, tp_all, fp_all, fn_all = {}, 0, 0, 0
    for c, name in enumerate(names):
        t, p = truth[:, c] == 1, predicted[:, c]
        tp, fp, fn, tn = (int(np.sum(t & p)), int(np.sum(~t & p)), int(np.sum(t & ~p)), int(np.sum(~t & ~p)))
        tp_all, fp_all, fn_all = tp_all + tp, fp_all + fp, fn_all + fn
        precision, recall = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
        rows[name] = {"support": int(t.sum()), "precision": precision, "recall": recall,
                      "f1": 2 * tp / max(2 * tp + fp + fn, 1), "auc": roc_auc(truth[:, c], scores[:, c]),
                      "average_precision": mean_average_precision(truth[:, [c]], scores[:, [c]]) if t.any() else None,
                      "threshold": thresholds[c], "tp": tp, "fp": fp, "fn": fn, "tn": tn}
    p = np.clip(scores, EPSILON, 1 - EPSILON)
    loss = float(np.mean(-np.mean(truth * np.log(p) + (1 - truth) * np.log(1 - p), axis=1)))
    aucs = [row["auc"] for row in rows.values() if row["auc"] is not None]
    found = mean_average_precision(truth, scores)
    return {"loss": loss, "auc": float(np.mean(aucs)) if aucs else None,  # None: no class defines it here
            "mean_average_precision": None if np.isnan(found) else found, "per_class": rows,
            "macro": {key: float(np.mean([row[key] for row in rows.values()])) for key in ("precision", "recall",
                                                                                           "f1")},
            "micro": {"precision": tp_all / max(tp_all + fp_all, 1), "recall": tp_all / max(tp_all + fn_all, 1),
                      "f1": 2 * tp_all / max(2 * tp_all + fp_all + fn_all, 1)}}


def report(result: dict) -> str:
    """The per-class table as report.txt and the terminal show it."""
    lines = [f"{'class':<20} {'support':>7} {'precision':>9} {'recall':>7} {'f1':>7} {'auc':>7} {'ap':>7} "
             f"{'thresh':>7} {'tp':>5} {'fp':>5} {'fn':>5} {'tn':>5}"]
    for name, row in result["per_class"].items():
        shown = [f"{figure(v):>7}" for v in (row["auc"], row["average_precision"])]
        lines.append(f"{name:<20} {row['support']:>7} {row['precision']:9.4f} {row['recall']:7.4f} {row['f1']:7.4f} "
                     f"{shown[0]} {shown[1]} {row['threshold']:7.3f} {row['tp']:>5} {row['fp']:>5} {row['fn']:>5} "
                     f"{row['tn']:>5}")
    macro, micro = result["macro"], result["micro"]
    lines += [f"{'macro':<20} {'':>7} {macro['precision']:9.4f} {macro['recall']:7.4f} {macro['f1']:7.4f}",
              f"{'micro':<20} {'':>7} {micro['precision']:9.4f} {micro['recall']:7.4f} {micro['f1']:7.4f}"]
    return "\n".join(lines)


def figure(value: float | None) -> str:
    """A figure to 4 places, or `-` where the split leaves it undefined (a class without a positive or a negative)."""
    return "-" if value is None else f"{value:.4f}"
