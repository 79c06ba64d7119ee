"""app/measures.py's scores of pixels, against sets of pixels counted one class at a time."""

from __future__ import annotations

import numpy as np
import pytest

from app.measures import pixel_confusion, segmentation_scores

CLASSES, IGNORE = 3, 255


def by_sets(truth: np.ndarray, predicted: np.ndarray, c: int) -> dict:
    """One class's IoU and Dice from its true and predicted pixels as sets."""
    true, said = truth == c, predicted == c
    both, either = np.sum(true & said), np.sum(true | said)
    return {"iou": both / either, "dice": 2 * both / (true.sum() + said.sum()), "precision": both / said.sum(),
            "recall": both / true.sum()}


def masks(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, CLASSES, (2, 16, 16))
    predicted = np.where(rng.random(truth.shape) < 0.7, truth, rng.integers(0, CLASSES, truth.shape))
    return truth, predicted


def test_each_classs_iou_dice_precision_and_recall_are_those_of_its_pixel_sets():
    truth, predicted = masks()
    scores = segmentation_scores(pixel_confusion(truth, predicted, CLASSES))
    for c in range(CLASSES):
        for name, value in by_sets(truth, predicted, c).items():
            assert scores[name][c] == pytest.approx(value)
    assert scores["mean_iou"] == pytest.approx(np.mean([by_sets(truth, predicted, c)["iou"] for c in range(CLASSES)]))
    assert scores["pixel_accuracy"] == pytest.approx(np.mean(truth == predicted))
    other = segmentation_scores(pixel_confusion(truth, masks(1)[1], CLASSES))  # negative control: another guess
    assert other["mean_iou"] < scores["mean_iou"] and other["pixel_accuracy"] < scores["pixel_accuracy"]


def test_pixels_under_the_ignore_index_weigh_nothing_whatever_is_predicted_there():
    truth, predicted = masks()
    ignored = truth.copy()
    ignored[:, :4] = IGNORE  # a band along a border, not annotated
    kept = segmentation_scores(pixel_confusion(truth[:, 4:], predicted[:, 4:], CLASSES))
    rng = np.random.default_rng(2)
    for _ in range(3):  # random guesses under the ignored band change nothing
        guess = predicted.copy()
        guess[:, :4] = rng.integers(0, CLASSES, guess[:, :4].shape)
        assert segmentation_scores(pixel_confusion(ignored, guess, CLASSES, ignore_index=IGNORE)) == kept
    with pytest.raises(ValueError, match="a true pixel is 255: neither one of the 3 classes"):  # the control: counted
        pixel_confusion(ignored, predicted, CLASSES)


def test_a_class_in_neither_truth_nor_prediction_has_no_score_and_is_left_out_of_the_means():
    truth = np.array([[0, 0, 1, 1]])
    scores = segmentation_scores(pixel_confusion(truth, truth, CLASSES))
    assert scores["iou"][:2] == [1.0, 1.0] and np.isnan(scores["iou"][2]) and scores["mean_iou"] == 1.0
    missed = segmentation_scores(pixel_confusion(truth, np.array([[0, 0, 2, 2]]), CLASSES))  # class 2 said, never true
    assert missed["iou"] == [1.0, 0.0, 0.0] and missed["mean_iou"] == pytest.approx(1 / 3)
    assert missed["precision"][2] == 0.0 and np.isnan(missed["recall"][2])
