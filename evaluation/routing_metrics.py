"""The routing evaluation's metrics: accuracy, macro-F1, load balance, out-of-scope detection, unseen labels.

Pure numpy and scikit-learn, no Django; ``evaluation.router`` scores every method with them.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def oos_metrics(in_scores: np.ndarray, oos_scores: np.ndarray) -> dict[str, float | None]:
    """AUROC of telling out-of-scope from in-scope (low score = out of scope) and OOS recall at 95% precision."""
    from sklearn.metrics import precision_recall_curve, roc_auc_score

    if len(oos_scores) == 0 or len(in_scores) == 0:
        return {"oos_auroc": None, "oos_recall_at_95_precision": None}
    truth = np.r_[np.zeros(len(in_scores)), np.ones(len(oos_scores))]
    score = -np.r_[in_scores, oos_scores]
    precision, recall, _ = precision_recall_curve(truth, score)
    ok = precision >= 0.95
    return {"oos_auroc": float(roc_auc_score(truth, score)), "oos_recall_at_95_precision": float(recall[ok].max()) if ok.any() else 0.0}


def classification_metrics(y_true: np.ndarray, y_pred: np.ndarray, n: int) -> dict[str, float]:
    """Accuracy, macro-F1, and how evenly the top-1 choices spread over the experts."""
    from sklearn.metrics import f1_score

    from routing.ml.diagnostics import load_cv, top1_shares

    shares = top1_shares(y_pred, n)
    mean = 1.0 / n
    return {
        "accuracy": float((y_true == y_pred).mean()),
        "macro_f1": float(f1_score(y_true, y_pred, average="macro", zero_division=0)),
        "load_cv": load_cv(y_pred, n),
        "load_max_deviation": float(np.abs(shares - mean).max() / mean),
    }


def unseen_metrics(in_scores: np.ndarray, unseen_scores: np.ndarray, threshold: float | None) -> dict[str, float | None]:
    """Test questions whose label no expert was trained on, scored as out of scope.

    ``unseen_abstention_recall``: share of them the method abstains on at its calibrated threshold;
    ``unseen_auroc``: how well its in-scope score tells them from the in-scope test questions.
    """
    if len(unseen_scores) == 0:
        return {"unseen_abstention_recall": None, "unseen_auroc": None}
    recall = float((unseen_scores < threshold).mean()) if threshold is not None else None
    return {"unseen_abstention_recall": recall, "unseen_auroc": oos_metrics(in_scores, unseen_scores)["oos_auroc"]}


def method_report(
    y_test: np.ndarray, test_out: tuple[np.ndarray, np.ndarray], oos_out: tuple[np.ndarray, np.ndarray], n: int, threshold: float | None,
    unseen_out: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Metrics of one method from its (scores (n, N), in-scope score (n,)) on test, OOS and unseen-label rows."""
    (test_scores, test_in), (_, oos_in) = test_out, oos_out
    report: dict[str, Any] = classification_metrics(y_test, test_scores.argmax(axis=1), n)
    report.update(oos_metrics(test_in, oos_in))
    if threshold is not None:
        report["abstain_threshold"] = float(threshold)
        report["in_scope_kept_at_threshold"] = float((test_in >= threshold).mean()) if len(test_in) else None
        report["oos_abstained_at_threshold"] = float((oos_in < threshold).mean()) if len(oos_in) else None
    if unseen_out is not None:
        report.update(unseen_metrics(test_in, unseen_out[1], threshold))
    return report
