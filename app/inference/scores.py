"""The `evaluate` command's scores, from one forward pass a batch, computed in numpy as Keras scores them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from app.measures import EPSILON
from app.processes import stop_if_interrupted


@dataclass(kw_only=True)
class Scores:
    images: int = 0
    loss_sum: float = 0.0
    correct: int = 0
    top_k_correct: int = 0
    # the most confident mistakes: (probability of the wrong class, position in the split, true, predicted)
    mistakes: list = field(default_factory=list)

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.images, 1)

    @property
    def accuracy(self) -> float:
        return self.correct / max(self.images, 1)

    def add_mistakes(self, p: np.ndarray, y: np.ndarray, predicted: np.ndarray, positions: np.ndarray,
                     keep: int = 16) -> None:
        for i in np.flatnonzero(predicted != y):
            self.mistakes.append((float(p[i, predicted[i]]), int(positions[i]), int(y[i]), int(predicted[i])))
        self.mistakes = sorted(self.mistakes, reverse=True)[:keep]


def evaluate(net, batches: Iterable[tuple[np.ndarray, ...]], confusion: np.ndarray | None = None,
             top_k: int | None = None, outputs: list | None = None) -> Scores:
    """Loss, accuracy (as Keras's), top-k, worst mistakes of (images, labels[, positions]) batches, into `confusion`;
    each batch's (positions, probabilities) appended to `outputs` where given (a patch run's images need them)."""
    scores = Scores()
    for x, y, *given in batches:
        stop_if_interrupted()
        positions = given[0] if given else np.arange(scores.images, scores.images + len(y))
        p = np.asarray(net.predict_on_batch(x), np.float64)
        p /= p.sum(axis=1, keepdims=True)
        picked = np.clip(p[np.arange(len(y)), y], EPSILON, 1 - EPSILON)
        predicted = p.argmax(axis=1)
        if outputs is not None:
            outputs.append((positions, p))
        if top_k:
            scores.top_k_correct += int((np.argsort(-p, axis=1)[:, :top_k] == y[:, None]).any(axis=1).sum())
        scores.add_mistakes(p, y, predicted, positions)
        scores.images += len(y)
        scores.loss_sum += float(-np.log(picked).sum())
        scores.correct += int((predicted == y).sum())
        if confusion is not None:
            np.add.at(confusion, (y, predicted), 1)
    return scores
