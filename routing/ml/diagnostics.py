"""Diagnostics of a trained router, as pure functions of its logits and the true experts.

Everything takes numpy arrays (logits ``(n, N)``, expert indices ``(n,)``) and returns plain
numbers, lists or dicts, so a run's diagnostics can be stored as JSON next to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ECE_BINS = 15


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax of ``logits / temperature``, numerically stable."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, n_experts: int) -> np.ndarray:
    """``(N, N)`` counts, rows the true expert, columns the predicted one."""
    matrix = np.zeros((n_experts, n_experts), dtype=np.int64)
    np.add.at(matrix, (np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)), 1)
    return matrix


def per_expert_precision_recall(y_true: np.ndarray, y_pred: np.ndarray, n_experts: int) -> list[dict[str, float | int]]:
    """Precision, recall, F1 and support per expert (0 where undefined, never NaN)."""
    matrix = confusion_matrix(y_true, y_pred, n_experts)
    tp = np.diag(matrix).astype(float)
    predicted, support = matrix.sum(axis=0), matrix.sum(axis=1)
    rows = []
    for i in range(n_experts):
        precision = tp[i] / predicted[i] if predicted[i] else 0.0
        recall = tp[i] / support[i] if support[i] else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        rows.append({"precision": float(precision), "recall": float(recall), "f1": float(f1), "support": int(support[i])})
    return rows


def top1_shares(y_pred: np.ndarray, n_experts: int) -> np.ndarray:
    """Share of the requests whose top-1 choice is each expert."""
    counts = np.bincount(np.asarray(y_pred, dtype=np.int64), minlength=n_experts).astype(float)
    return counts / max(1.0, counts.sum())


def shares_cv(shares: Any) -> float:
    """Coefficient of variation (population std / mean) of traffic shares; 0 is perfectly even."""
    shares = np.asarray(shares, dtype=float)
    mean = shares.mean() if shares.size else 0.0
    return float(shares.std() / mean) if mean > 0 else 0.0


def load_cv(y_pred: np.ndarray, n_experts: int) -> float:
    """``shares_cv`` of the experts' top-1 shares."""
    return shares_cv(top1_shares(y_pred, n_experts))


def expected_calibration_error(probs: np.ndarray, y_true: np.ndarray, n_bins: int = ECE_BINS) -> float:
    """ECE: the confidence-weighted gap between top-1 confidence and accuracy over equal-width bins."""
    probs = np.asarray(probs, dtype=np.float64)
    if probs.shape[0] == 0:
        return 0.0
    confidence = probs.max(axis=1)
    correct = probs.argmax(axis=1) == np.asarray(y_true)
    # Bin i holds confidences in (i/n, (i+1)/n]; a confidence of exactly 0 joins the first bin.
    bins = np.clip(np.ceil(confidence * n_bins).astype(int) - 1, 0, n_bins - 1)
    ece = 0.0
    for b in range(n_bins):
        mask = bins == b
        if mask.any():
            ece += mask.mean() * abs(correct[mask].mean() - confidence[mask].mean())
    return float(ece)


def nll(logits: np.ndarray, y_true: np.ndarray, temperature: float = 1.0) -> float:
    """Mean negative log-likelihood of the true experts under ``softmax(logits / T)``."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z).sum(axis=1))
    return float((log_norm - z[np.arange(z.shape[0]), np.asarray(y_true)]).mean())


def fit_temperature(logits: np.ndarray, y_true: np.ndarray, bounds: tuple[float, float] = (0.05, 20.0)) -> float:
    """Temperature scaling: the T > 0 minimising validation NLL of ``softmax(logits / T)``.

    NLL is convex in 1/T, so a bounded scalar search over log T finds the minimum reliably.
    """
    from scipy.optimize import minimize_scalar

    if np.asarray(logits).shape[0] == 0:
        return 1.0
    result = minimize_scalar(lambda log_t: nll(logits, y_true, float(np.exp(log_t))), bounds=tuple(np.log(bounds)), method="bounded")
    return float(np.exp(result.x))


def logit_variance(logits: np.ndarray, rel_tol: float = 0.01, abs_tol: float = 1e-6) -> dict[str, Any]:
    """Variance of each expert's logit across requests, flagging "undecided" experts.

    An expert whose logit barely moves from one question to the next is not being discriminated: the
    router gives it (nearly) the same score whatever is asked. Flagged when its variance is below
    ``abs_tol`` or below ``rel_tol`` times the median expert's variance.
    """
    variance = np.asarray(logits, dtype=np.float64).var(axis=0) if len(logits) else np.zeros(np.asarray(logits).shape[1])
    median = float(np.median(variance)) if variance.size else 0.0
    undecided = [int(i) for i, v in enumerate(variance) if v < abs_tol or v < rel_tol * median]
    return {"variance": [float(v) for v in variance], "undecided": undecided}


def diagnose(logits: np.ndarray, y_true: np.ndarray, n_experts: int, names: list[str] | None = None) -> dict[str, Any]:
    """Every diagnostic of one evaluation split, JSON-ready.

    Args:
        logits: router logits ``(n, N)`` on the split.
        y_true: true expert indices ``(n,)``.
        n_experts: N.
        names: expert names in output order (default: their indices as strings).

    Returns:
        accuracy, macro-F1, per-expert precision/recall, the confusion matrix, top-1 shares and their
        coefficient of variation, ECE before and after temperature scaling, the fitted temperature,
        logit variances and the undecided experts.
    """
    logits = np.asarray(logits, dtype=np.float64)
    y_true = np.asarray(y_true, dtype=np.int64)
    names = names or [str(i) for i in range(n_experts)]
    y_pred = logits.argmax(axis=1) if len(logits) else np.zeros(0, dtype=np.int64)
    per_expert = per_expert_precision_recall(y_true, y_pred, n_experts)
    temperature = fit_temperature(logits, y_true)
    variance = logit_variance(logits)
    present = [row["f1"] for row in per_expert if row["support"]]
    return {
        "n": len(y_true),
        "accuracy": float((y_pred == y_true).mean()) if len(y_true) else 0.0,
        "macro_f1": float(np.mean(present)) if present else 0.0,
        "per_expert": {name: row for name, row in zip(names, per_expert, strict=True)},
        "confusion": confusion_matrix(y_true, y_pred, n_experts).tolist(),
        "top1_share": {name: float(s) for name, s in zip(names, top1_shares(y_pred, n_experts), strict=True)},
        "load_cv": load_cv(y_pred, n_experts),
        "temperature": temperature,
        "nll": nll(logits, y_true) if len(y_true) else 0.0,
        "nll_calibrated": nll(logits, y_true, temperature) if len(y_true) else 0.0,
        "ece": expected_calibration_error(softmax(logits), y_true) if len(y_true) else 0.0,
        "ece_calibrated": expected_calibration_error(softmax(logits, temperature), y_true) if len(y_true) else 0.0,
        "logit_variance": {name: v for name, v in zip(names, variance["variance"], strict=True)},
        "undecided": [names[i] for i in variance["undecided"]],
    }
