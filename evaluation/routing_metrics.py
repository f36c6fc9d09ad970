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


def part_scores(method: Any, part: tuple[np.ndarray, list[str]], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``method.scores`` of one part's embeddings and texts: scores (rows, n) and in-scope scores (rows,); empty for an empty part."""
    x, texts = part
    return method.scores(x, texts) if len(x) else (np.zeros((0, n)), np.zeros(0))


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


def routing_targets(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, checked on this run's figures.

    The best baseline is the best of every full-strength baseline in the report (logistic regression
    and nearest examples, without and with the router's typo copies); ``val_macro_f1_ge_best_baseline``
    reads the validation figures (``comparison``), the others the test ones.
    """
    names = [n for n in ("logreg", "knn", "logreg_typos", "knn_typos") if n in report]
    router, baselines = report["router"], [report[n] for n in names]
    out: dict[str, Any] = {
        "accuracy_ge_best_baseline": router["accuracy"] >= max(b["accuracy"] for b in baselines),
        "macro_f1_ge_best_baseline": router["macro_f1"] >= max(b["macro_f1"] for b in baselines),
    }
    comparison = report.get("comparison")
    if comparison:
        out["val_macro_f1_ge_best_baseline"] = comparison["router"]["val_macro_f1"] >= max(comparison[n]["val_macro_f1"] for n in names)
    if "embed_p50_ms" in report:
        out["route_p50_le_1.05x_embed"] = router["route_p50_ms"] <= 1.05 * report["embed_p50_ms"]
        out["route_p50_le_1.10x_embed"] = router["route_p50_ms"] <= 1.10 * report["embed_p50_ms"]  # issue 19's bound, with the spelling view
    knowledge = report.get("router_knowledge")
    if knowledge:
        out["knowledge_macro_f1_ge_best_baseline"] = knowledge["macro_f1"] >= max(b["macro_f1"] for b in baselines)
        out["knowledge_macro_f1_ge_router"] = knowledge["macro_f1"] >= router["macro_f1"]
        if "documents_only" in knowledge:
            out["knowledge_macro_f1_ge_documents_only"] = knowledge["macro_f1"] >= knowledge["documents_only"]["macro_f1"]
        if "route_p50_ms" in knowledge and "embed_p50_ms" in report:
            out["knowledge_route_p50_le_1.10x_embed"] = knowledge["route_p50_ms"] <= 1.10 * report["embed_p50_ms"]
    fast = report.get("fast_tier")
    if fast and fast.get("trained"):  # issue 21: the fast tier's encoder costs at most 1 ms a question
        out["fast_tier_embed_p50_le_1ms"] = fast["embed_p50_ms"] is not None and fast["embed_p50_ms"] <= 1.0
    typo = report.get("typo10") or {}
    if typo:
        out["typo10_loss_le_half_knn"] = typo["router"]["accuracy_loss"] <= 0.5 * typo["knn"]["accuracy_loss"]
    if router["oos_auroc"] is not None:
        out["oos_auroc_ge_best_baseline"] = router["oos_auroc"] >= max(b["oos_auroc"] for b in baselines)
    if report["test_label_cv"] < 0.05:  # balanced classes
        out["load_within_15pct_of_mean"] = router["load_max_deviation"] <= 0.15
    return out
