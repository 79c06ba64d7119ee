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
