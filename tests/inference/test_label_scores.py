"""Several labels an image (app/inference/label_scores.py): ROC AUC, each class's best threshold and
the per-class table against hand-worked figures."""

from __future__ import annotations

import numpy as np
import pytest

from app.inference.label_scores import best_thresholds, roc_auc, table


def test_roc_auc_is_the_chance_a_positive_outranks_a_negative():
    truth = np.array([1, 0, 1, 0])
    assert roc_auc(truth, np.array([0.9, 0.8, 0.7, 0.1])) == pytest.approx(3 / 4)  # 0.7 < 0.8: one pair lost
    assert roc_auc(truth, np.array([0.5, 0.5, 0.5, 0.5])) == pytest.approx(0.5)  # ties count half
    assert roc_auc(np.array([1, 1]), np.array([0.2, 0.3])) is None  # negative control: no negative, no AUC


def test_the_best_threshold_maximises_each_classs_f1_and_the_table_counts_at_it():
    truth = np.array([[1, 0], [1, 0], [0, 0], [0, 0]], np.uint8)
    scores = np.array([[0.9, 0.2], [0.6, 0.1], [0.7, 0.3], [0.2, 0.4]])
    # class 0: at 0.6 all three above it, F1 = 2·2/(2+3) = 0.8; at 0.9 one, F1 = 2/3; at 0.7 two, F1 = 0.5
    thresholds = best_thresholds(truth, scores, default=0.5)
    # halfway from 0.6 to the next score below (0.2): 0.4; class 1 has no positive: the default
    assert thresholds == pytest.approx([0.4, 0.5])
    result = table(truth, scores, ["a", "b"], thresholds)
    a = result["per_class"]["a"]
    assert (a["tp"], a["fp"], a["fn"], a["tn"]) == (2, 1, 0, 1) and a["f1"] == pytest.approx(0.8)
    assert result["per_class"]["b"]["auc"] is None and result["per_class"]["b"]["average_precision"] is None
    at_six = table(truth, scores, ["a", "b"], [0.6, 0.5])["per_class"]["a"]  # the same decisions as at 0.4
    assert (at_six["tp"], at_six["fp"]) == (2, 1) and table(truth, scores, ["a", "b"], [0.8, 0.5])[
        "per_class"]["a"]["tp"] == 1
