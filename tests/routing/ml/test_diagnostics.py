"""Router diagnostics: per-expert precision/recall, confusion, load, calibration and undecided experts."""

import numpy as np
import pytest

from routing.ml.diagnostics import (
    confusion_matrix,
    diagnose,
    expected_calibration_error,
    fit_temperature,
    load_cv,
    logit_variance,
    nll,
    per_expert_precision_recall,
    softmax,
)


def test_confusion_matrix_counts_true_rows_against_predicted_columns():
    matrix = confusion_matrix(np.array([0, 0, 1, 2, 2]), np.array([0, 1, 1, 2, 0]), 3)
    assert matrix.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 1]]


def test_precision_and_recall_per_expert_are_exact_and_never_nan():
    rows = per_expert_precision_recall(np.array([0, 0, 1, 2, 2]), np.array([0, 1, 1, 2, 0]), 4)
    assert rows[0] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2}
    assert rows[1]["precision"] == 0.5
    assert rows[1]["recall"] == 1.0
    assert rows[2]["precision"] == 1.0
    assert rows[2]["recall"] == 0.5
    assert rows[3] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}  # never predicted, never true


def test_load_cv_is_zero_when_even_and_grows_with_concentration():
    assert load_cv(np.array([0, 1, 2, 3] * 5), 4) == pytest.approx(0.0)
    assert load_cv(np.array([0] * 20), 4) == pytest.approx(np.sqrt(3))  # shares (1, 0, 0, 0): std 0.433 / mean 0.25


def test_ece_is_zero_for_perfectly_calibrated_predictions_and_the_gap_otherwise():
    probs = np.array([[0.8, 0.2]] * 10)
    y_calibrated = np.array([0] * 8 + [1] * 2)  # 80% right at 80% confidence
    assert expected_calibration_error(probs, y_calibrated) == pytest.approx(0.0)
    assert expected_calibration_error(probs, np.zeros(10, dtype=int)) == pytest.approx(0.2)  # 100% right at 80%


def test_temperature_scaling_cools_an_overconfident_router_and_lowers_nll():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 2000)
    logits = rng.normal(size=(2000, 4))
    logits[np.arange(2000), y] += 1.0
    overconfident = logits * 5
    t = fit_temperature(overconfident, y)
    assert t == pytest.approx(5.0, rel=0.15)
    assert nll(overconfident, y, t) < nll(overconfident, y)
    assert expected_calibration_error(softmax(overconfident, t), y) < expected_calibration_error(softmax(overconfident), y)


def test_an_expert_whose_logit_never_moves_is_flagged_undecided():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(100, 3))
    logits[:, 1] = 0.7  # the same score whatever the question
    report = logit_variance(logits)
    assert report["undecided"] == [1]
    assert report["variance"][1] == pytest.approx(0.0)


def test_diagnose_reports_everything_with_expert_names_as_json_ready_values():
    rng = np.random.default_rng(1)
    y = np.repeat([0, 1, 2], 30)
    logits = rng.normal(size=(90, 3))
    logits[np.arange(90), y] += 3
    report = diagnose(logits, y, 3, ["dmv", "ssa", "va"])
    assert set(report["per_expert"]) == {"dmv", "ssa", "va"}
    assert report["confusion"][0][0] == report["per_expert"]["dmv"]["support"] * report["per_expert"]["dmv"]["recall"]
    assert sum(report["top1_share"].values()) == pytest.approx(1.0)
    assert report["accuracy"] > 0.8
    assert report["ece_calibrated"] <= report["ece"] + 0.02
    assert report["undecided"] == []
    assert isinstance(report["confusion"][0][0], int)
