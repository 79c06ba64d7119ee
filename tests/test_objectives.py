"""The recipe's own loss and metric against Keras's and numpy's arithmetic."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from app.objectives import PerClassRecall, SmoothedSparseCrossentropy


def probabilities(n: int = 12, classes: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.random((n, classes)).astype(np.float32) + 0.05
    return rng.integers(0, classes, n), p / p.sum(axis=1, keepdims=True)


def test_label_smoothing_scores_as_kerass_categorical_loss_on_one_hot_labels():
    y, p = probabilities()
    one_hot = np.eye(4, dtype=np.float32)[y]
    for smoothing in (0.0, 0.1, 0.3):
        ours = float(SmoothedSparseCrossentropy(smoothing)(y, p))
        theirs = float(keras.losses.CategoricalCrossentropy(label_smoothing=smoothing)(one_hot, p))
        assert ours == pytest.approx(theirs, rel=1e-5), smoothing
    # negative control: smoothing changes the score
    assert float(SmoothedSparseCrossentropy(0.3)(y, p)) != pytest.approx(float(SmoothedSparseCrossentropy(0.0)(y, p)))
    assert float(SmoothedSparseCrossentropy(0.0)(y, p)) == pytest.approx(
        float(keras.losses.SparseCategoricalCrossentropy()(y, p)), rel=1e-5)


def test_per_class_recall_counts_each_class_over_batches():
    names = ["a", "b", "c", "d"]
    metric = PerClassRecall(names)
    y, p = probabilities(40)
    metric.update_state(y[:25], p[:25])
    metric.update_state(y[25:], p[25:])
    got = {k: float(v) for k, v in metric.result().items()}
    predicted = p.argmax(1)
    expected = {f"recall_{n}": float((predicted[y == i] == i).mean()) for i, n in enumerate(names)}
    assert got == pytest.approx(expected)
    metric.reset_state()
    assert all(float(v) == 0 for v in metric.result().values())
    # a checkpoint's compile config brings it back
    again = keras.metrics.deserialize(keras.metrics.serialize(PerClassRecall(names)))
    assert again.class_names == names
