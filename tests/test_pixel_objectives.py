"""data.task=segmentation's loss and scores against numpy's arithmetic and app/measures.py, on TensorFlow and JAX."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import keras
import numpy as np
import pytest

from app.measures import pixel_confusion, segmentation_scores
from app.pixel_objectives import PixelLoss, PixelScores

NAMES = ["sky", "road", "car", "tree"]
IGNORE = 255


def case(seed: int = 0, batch: int = 3, size: int = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels (a quarter ignored), softmax probabilities, the ignore mask; class 3 neither true nor predicted."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, (batch, size, size)).astype(np.uint8)
    ignored = rng.random(labels.shape) < 0.25
    labels[ignored] = IGNORE
    logits = rng.normal(size=(batch, size, size, 4)).astype(np.float32)
    logits[..., 3] -= 10.0
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return labels, p.astype(np.float32), ignored


def scores(metric: PixelScores) -> dict[str, float]:
    return {k: float(v) for k, v in metric.result().items()}


def measured(labels: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """app/measures.py's figures in PixelScores' names."""
    table = segmentation_scores(pixel_confusion(labels, p.argmax(-1), 4, ignore_index=IGNORE))
    return {"miou": table["mean_iou"], "dice": table["mean_dice"], "pixel_accuracy": table["pixel_accuracy"],
            **{f"iou_{n}": table["iou"][i] for i, n in enumerate(NAMES)}}


def test_the_scores_are_app_measures_over_batches_padding_rows_counting_nowhere():
    labels, p, _ = case()
    expected = measured(labels, p)
    assert np.isnan(expected["iou_tree"])  # undefined: app/measures' NaN, the metric's 0, left out of both means
    metric = PixelScores(NAMES, ignore_index=IGNORE)
    metric.update_state(labels[:2], p[:2])
    metric.update_state(np.r_[labels[2:], labels[:1] * 0], np.r_[p[2:], p[:1]], sample_weight=np.array([1.0, 0.0]))
    got = scores(metric)
    assert got == pytest.approx({k: (0.0 if np.isnan(v) else v) for k, v in expected.items()}, abs=1e-6)
    # negative controls: the padding row counted, and a confusion perturbed by one pixel, disagree
    padded = PixelScores(NAMES, ignore_index=IGNORE)
    padded.update_state(np.r_[labels, labels[:1] * 0], np.r_[p, p[:1]])
    assert scores(padded)["pixel_accuracy"] != pytest.approx(expected["pixel_accuracy"], abs=1e-6)
    moved = metric.confusion.numpy().reshape(4, 4)
    moved[0, 0], moved[0, 1] = moved[0, 0] - 1, moved[0, 1] + 1
    assert segmentation_scores(moved)["mean_iou"] != pytest.approx(got["miou"], abs=1e-6)
    metric.reset_state()
    assert scores(metric)["pixel_accuracy"] == 0.0


def test_ignored_pixels_weigh_nothing_in_the_loss_and_the_scores():
    labels, p, ignored = case(seed=1)
    noisy, other = labels.copy(), p.copy()
    rng = np.random.default_rng(9)
    noisy[ignored] = rng.integers(0, 4, int(ignored.sum()))  # ignored pixels relabelled at random ...
    other[ignored] = rng.permutation(p[ignored])  # ... and predicted otherwise
    for kind in ("crossentropy", "dice", "crossentropy+dice"):
        loss = PixelLoss(4, kind, ignore_index=IGNORE)
        relabelled = np.where(ignored, IGNORE, noisy)
        assert float(loss(labels, p)) == pytest.approx(float(loss(relabelled, other)), rel=1e-6), kind
        # negative control: without the ignore mask the random labels change it
        assert float(loss(labels, p)) != pytest.approx(float(PixelLoss(4, kind)(noisy, p)), rel=1e-3), kind
    metric, again = PixelScores(NAMES, ignore_index=IGNORE), PixelScores(NAMES, ignore_index=IGNORE)
    metric.update_state(labels, p)
    again.update_state(labels, other)
    assert scores(metric) == scores(again)
    unmasked = PixelScores(NAMES)  # negative control: the relabelled pixels counted
    unmasked.update_state(noisy, p)
    assert scores(unmasked)["pixel_accuracy"] != pytest.approx(scores(metric)["pixel_accuracy"])


def numpy_crossentropy(labels: np.ndarray, p: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each sample's weighted mean −log p_y over its kept pixels: PyTorch's CrossEntropyLoss(weight, ignore_index)."""
    out = []
    for y, q in zip(labels, p, strict=True):
        kept = y != IGNORE
        w = weights[y[kept]]
        out.append(np.sum(w * -np.log(q[kept, y[kept]])) / w.sum() if kept.any() else 0.0)
    return np.array(out)


def test_the_crossentropy_is_one_weighted_mean_a_sample_and_class_weights_change_it():
    labels, p, _ = case(seed=2)
    labels[1] = IGNORE  # a sample with no kept pixel: 0, and weight 0 keeps it out of the mean
    weights = np.array([1.0, 4.0, 0.5, 2.0])
    loss = PixelLoss(4, ignore_index=IGNORE, class_weights=weights.tolist(), reduction=None)
    each = np.asarray(loss(labels, p))
    assert each.shape == (3,) and each == pytest.approx(numpy_crossentropy(labels, p, weights), rel=1e-5)
    assert each[1] == 0.0
    plain = np.asarray(PixelLoss(4, ignore_index=IGNORE, reduction=None)(labels, p))
    assert plain == pytest.approx(numpy_crossentropy(labels, p, np.ones(4)), rel=1e-5)
    assert not np.allclose(plain, each)  # negative control: the class weights change it
    # Keras weighs each sample's value: a padding row (weight 0) adds nothing to the sum
    summed = PixelLoss(4, ignore_index=IGNORE, class_weights=weights.tolist(), reduction="sum")
    assert float(summed(labels, p, sample_weight=np.array([1.0, 1.0, 0.0]))) == pytest.approx(each[0], rel=1e-5)


def test_dice_of_a_perfect_prediction_is_about_nothing_and_of_a_wrong_one_about_one():
    labels, _, _ = case(seed=3)
    labels[labels == IGNORE] = 0
    perfect = np.eye(4, dtype=np.float32)[labels]
    assert float(PixelLoss(4, "dice")(labels, perfect)) == pytest.approx(0.0, abs=1e-5)
    wrong = np.eye(4, dtype=np.float32)[(labels + 1) % 3]
    assert float(PixelLoss(4, "dice")(labels, wrong)) > 0.7  # negative control
    both = float(PixelLoss(4, "crossentropy+dice")(labels, wrong))
    assert both == pytest.approx(float(PixelLoss(4)(labels, wrong)) + float(PixelLoss(4, "dice")(labels, wrong)))
    with pytest.raises(ValueError, match="none of"):
        PixelLoss(4, "focal")


def test_the_loss_and_scores_come_back_from_their_config():
    loss = PixelLoss(4, "crossentropy+dice", ignore_index=IGNORE, class_weights=[1, 2, 3, 4])
    again = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(again, PixelLoss) and again.get_config() == loss.get_config()
    labels, p, _ = case(seed=4)
    assert float(again(labels, p)) == pytest.approx(float(loss(labels, p)))
    metric = keras.metrics.deserialize(keras.metrics.serialize(PixelScores(NAMES, ignore_index=IGNORE)))
    assert isinstance(metric, PixelScores) and (metric.class_names, metric.ignore_index) == (NAMES, IGNORE)


def on_the_backend() -> dict:
    """The loss and scores of `case`, and one compiled training step's, on the backend this process runs."""
    # here, not at the top: this function's source is also the script of a process that picks its backend first
    import keras

    from app.pixel_objectives import PixelLoss, PixelScores

    labels, p, _ = case()
    metric = PixelScores(NAMES, ignore_index=IGNORE)
    metric.update_state(labels, p)
    net = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 1, activation="softmax")])
    net.compile(optimizer="sgd", loss=PixelLoss(4, "crossentropy+dice", ignore_index=IGNORE),
                metrics=[PixelScores(NAMES, ignore_index=IGNORE)])
    logs = net.train_on_batch(p[..., :3], labels, sample_weight=np.array([1.0, 1.0, 0.0]), return_dict=True)
    return {"loss": [float(PixelLoss(4, kind, ignore_index=IGNORE)(labels, p)) for kind in ("crossentropy", "dice")],
            "scores": {k: float(v) for k, v in metric.result().items()},
            "step": bool(np.isfinite(logs["loss"]) and 0 <= logs["miou"] <= 1)}


ON_JAX = ("import os, json\nos.environ['KERAS_BACKEND'] = 'jax'\nimport numpy as np\n"
          f"NAMES, IGNORE = {NAMES!r}, {IGNORE}\n" + inspect.getsource(case) + inspect.getsource(on_the_backend)
          + "print(json.dumps(on_the_backend()))")


def test_jax_computes_what_tensorflow_does_and_trains_a_step_with_them():
    done = subprocess.run([sys.executable, "-c", ON_JAX], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    jax, tensorflow = json.loads(done.stdout.strip().splitlines()[-1]), on_the_backend()
    assert jax["step"] and tensorflow["step"]
    assert jax["loss"] == pytest.approx(tensorflow["loss"], rel=1e-5)
    assert jax["scores"] == pytest.approx(tensorflow["scores"], abs=1e-6)
