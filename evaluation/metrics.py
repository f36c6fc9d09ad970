"""Clustering quality against gold labels, with one explicit rule for noise. Pure: no Django.

``-1`` is noise. ARI, NMI and V-measure count noise as one more cluster (what a reviewer would see);
purity counts noise points as wrong. ``noise_fraction`` is the share of ``-1``, ``n_clusters`` the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from sklearn.metrics import adjusted_rand_score, homogeneity_completeness_v_measure, normalized_mutual_info_score

NOISE = -1


@dataclass
class ClusteringScores:
    """Agreement of one clustering with the gold labels (see the module docstring for the noise rule)."""

    n_clusters: int
    noise_fraction: float
    ari: float
    nmi: float
    v_measure: float
    purity: float
    homogeneity: float
    completeness: float

    def as_dict(self) -> dict[str, float | int]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _codes(values: Sequence | np.ndarray) -> np.ndarray:
    """Integer codes for arbitrary hashable labels (strings, ints)."""
    _, codes = np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)
    return codes.astype(int)


def purity(gold: Sequence | np.ndarray, predicted: Sequence | np.ndarray) -> float:
    """Share of points whose predicted cluster's majority gold label is their own; noise (-1) counts as wrong."""
    gold_codes = _codes(gold)
    pred = np.asarray(predicted, dtype=int)
    if pred.shape[0] != gold_codes.shape[0]:
        raise ValueError("gold and predicted labels differ in length")
    if pred.size == 0:
        return 0.0
    keep = pred != NOISE
    if not keep.any():
        return 0.0
    _, pred_codes = np.unique(pred[keep], return_inverse=True)
    table = np.zeros((pred_codes.max() + 1, gold_codes.max() + 1), dtype=np.int64)
    np.add.at(table, (pred_codes, gold_codes[keep]), 1)
    return float(table.max(axis=1).sum() / pred.size)


def score_clustering(gold: Sequence | np.ndarray, predicted: Sequence | np.ndarray) -> ClusteringScores:
    """All scores of ``predicted`` against ``gold``, noise handled as the module docstring says."""
    gold_codes = _codes(gold)
    pred = np.asarray(predicted, dtype=int)
    if pred.shape[0] != gold_codes.shape[0]:
        raise ValueError("gold and predicted labels differ in length")
    homogeneity, completeness, v_measure = homogeneity_completeness_v_measure(gold_codes, pred)
    return ClusteringScores(
        n_clusters=len(set(pred.tolist()) - {NOISE}),
        noise_fraction=float((pred == NOISE).mean()) if pred.size else 0.0,
        ari=float(adjusted_rand_score(gold_codes, pred)),
        nmi=float(normalized_mutual_info_score(gold_codes, pred)),
        v_measure=float(v_measure),
        purity=purity(gold_codes, pred),
        homogeneity=float(homogeneity),
        completeness=float(completeness),
    )
