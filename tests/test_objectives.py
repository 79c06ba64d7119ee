"""The recipe's own loss and metric against Keras's and numpy's arithmetic."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import keras
import numpy as np
import pytest

from app.inference import label_scores
from app.measures import mean_average_precision
from app.objectives import (
    MacroAUC,
    MeanAveragePrecision,
    PerClassRecall,
    SmoothedSparseCrossentropy,
    WeightedBinaryCrossentropy,
)


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


def test_weighted_binary_crossentropy_is_the_numpy_formula_and_kerass_without_weights():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, (10, 3)).astype(np.uint8)
    p = rng.uniform(0.02, 0.98, (10, 3)).astype(np.float32)
    w = np.array([1.0, 3.0, 0.5], np.float32)
    for smoothing in (0.0, 0.2):
        t = y * (1 - smoothing) + 0.5 * smoothing
        numpy = np.mean(-np.mean(w * t * np.log(p) + (1 - t) * np.log(1 - p), axis=-1))
        ours = float(WeightedBinaryCrossentropy(w, smoothing)(y, p))
        assert ours == pytest.approx(numpy, rel=1e-5), smoothing
        keras_own = float(keras.losses.BinaryCrossentropy(label_smoothing=smoothing)(y.astype(np.float32), p))
        assert float(WeightedBinaryCrossentropy(None, smoothing)(y, p)) == pytest.approx(keras_own, rel=1e-4)
    # negative control: the weights change the score
    assert float(WeightedBinaryCrossentropy(w)(y, p)) != pytest.approx(float(WeightedBinaryCrossentropy()(y, p)))


def test_mean_average_precision_by_hand():
    # class 0: scores rank the positives 1st and 3rd: AP = (1/2)·1 + (1/2)·(2/3) = 5/6
    # class 1: a tie between the one positive and a negative at the top: AP = 1·(1/2) = 1/2
    # class 2: no positive: left out of the mean
    truth = np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0]])
    scores = np.array([[0.9, 0.8, 0.1], [0.8, 0.8, 0.2], [0.7, 0.1, 0.3], [0.1, 0.2, 0.4]])
    assert mean_average_precision(truth, scores) == pytest.approx((5 / 6 + 1 / 2) / 2)
    perfect = mean_average_precision(truth, truth.astype(float))  # negative control: a perfect ranking is 1
    assert perfect == pytest.approx(1.0) and np.isnan(mean_average_precision(truth[:, 2:], scores[:, 2:]))


def test_the_epochs_binned_mean_average_precision_is_the_exact_one_where_scores_tie_within_a_bin():
    rng = np.random.default_rng(3)
    truth = (rng.random((300, 5)) < 0.3).astype(np.uint8)
    truth[:, 4] = 0  # a class without a positive: left out of the mean, as the exact one leaves it
    scores = np.clip(truth * 0.3 + rng.random((300, 5)) * 0.7, 0, 1).astype(np.float32)
    binned = (np.floor(scores * 100) + 0.5) / 100  # every score at its bin's middle: ties only within a bin
    metric = MeanAveragePrecision(5, bins=100)
    for rows in np.array_split(np.arange(300), 7):  # batch by batch, as an epoch feeds it
        metric.update_state(truth[rows], binned[rows])
    assert float(metric.result()) == pytest.approx(mean_average_precision(truth, binned), abs=1e-5)
    fine = MeanAveragePrecision(5)  # 1,000 bins by default: close to the exact figure on raw scores
    fine.update_state(truth, scores)
    assert float(fine.result()) == pytest.approx(mean_average_precision(truth, scores), abs=2e-3)
    # negative controls: a padding row (weight 0) counts nowhere; shuffled labels score lower
    padded = MeanAveragePrecision(5, bins=100)
    padded.update_state(np.r_[truth, np.ones((9, 5), np.uint8)], np.r_[binned, np.zeros((9, 5), np.float32)],
                        sample_weight=np.r_[np.ones(300), np.zeros(9)])
    assert float(padded.result()) == pytest.approx(mean_average_precision(truth, binned), abs=1e-5)
    shuffled = MeanAveragePrecision(5)
    shuffled.update_state(rng.permutation(truth), scores)
    assert float(shuffled.result()) < mean_average_precision(truth, scores) - 0.2


def binned_case(seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """300 rows of 4 classes: class 2 without a positive, class 3 without a negative; each score at its bin's middle."""
    rng = np.random.default_rng(seed)
    truth = (rng.random((300, 4)) < 0.3).astype(np.uint8)
    truth[:, 2], truth[:, 3] = 0, 1
    scores = np.clip(truth * 0.3 + rng.random((300, 4)) * 0.7, 0, 1)
    return truth, ((np.floor(scores * 100) + 0.5) / 100).astype(np.float32)


def test_the_epochs_macro_auc_leaves_out_a_class_without_a_positive_or_a_negative_as_evaluate_does():
    truth, scores = binned_case()
    evaluated = label_scores.table(truth, scores.astype(np.float64), list("abcd"), [0.5] * 4)["auc"]
    metric = MacroAUC(4, bins=100)
    for rows in np.array_split(np.arange(300), 7):
        metric.update_state(truth[rows], scores[rows])
    assert float(metric.result()) == pytest.approx(evaluated, abs=1e-5)
    fine = MacroAUC(4)  # 1,000 bins by default, finer than the scores' own: the same figure
    fine.update_state(truth, scores)
    assert float(fine.result()) == pytest.approx(evaluated, abs=1e-5)
    # negative control: Keras's AUC(multi_label=True) counts the two undefined classes
    keras_own = keras.metrics.AUC(multi_label=True, num_labels=4)
    keras_own.update_state(truth, scores)
    assert abs(float(keras_own.result()) - evaluated) > 0.1
    none_defined = MacroAUC(4)  # no class defined: 0, as the mean average precision of no positive
    none_defined.update_state(np.zeros((5, 4), np.uint8), scores[:5])
    assert float(none_defined.result()) == 0.0


def saved_and_loaded(path: str) -> list[float]:
    """A model compiled with MacroAUC saved and loaded by Keras: its AUC before and after, and class 0's by hand."""
    truth = np.array([[1, 0], [0, 0], [1, 0], [0, 0]], np.float32)  # class 1: no positive
    x = np.array([[0.9], [0.2], [0.3], [0.4]], np.float32)  # class 0's AUC 0.75: one pair out of order
    net = keras.Sequential([keras.Input((1,)), keras.layers.Dense(2, activation="sigmoid")])
    net.layers[0].set_weights([np.array([[4.0, 1.0]], np.float32), np.zeros(2, np.float32)])  # scores bins apart
    net.compile(loss="binary_crossentropy", metrics=[MacroAUC(2)])
    net.save(path)
    loaded = keras.saving.load_model(path)
    p = loaded.predict(x, verbose=0)[:, 0]
    return [net.evaluate(x, truth, return_dict=True, verbose=0)["auc"],
            loaded.evaluate(x, truth, return_dict=True, verbose=0)["auc"],
            float(np.mean([(p[i] > p[j]) + 0.5 * (p[i] == p[j]) for i in (0, 2) for j in (1, 3)]))]


ON_JAX = ("import os, sys, json\nos.environ['KERAS_BACKEND'] = 'jax'\nimport keras, numpy as np\n"
          "from app.objectives import MacroAUC\n" + inspect.getsource(saved_and_loaded)
          + "print(json.dumps(saved_and_loaded(sys.argv[1])))")


def test_the_macro_auc_is_saved_and_loaded_with_a_checkpoint_on_tensorflow_and_jax(tmp_path):
    done = subprocess.run([sys.executable, "-c", ON_JAX, str(tmp_path / "jax.keras")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    for trained, loaded, class_0 in (saved_and_loaded(str(tmp_path / "tf.keras")),
                                     json.loads(done.stdout.strip().splitlines()[-1])):
        assert trained == pytest.approx(loaded) == pytest.approx(class_0, abs=1e-3) == pytest.approx(0.75)
