"""Query drift: are recent questions still like the ones the router was trained on? Pure numpy/scipy/scikit-learn.

Three signals, each with a p-value: the mean-embedding cosine shift (permutation test), a classifier
two-sample test (C2ST, Lopez-Paz & Oquab 2017: out-of-fold AUC and its Mann-Whitney p-value) and the
abstention share against the training rate (one-sided binomial). Drifted: any of them significant at
``alpha`` and large enough (shift ≥ ``min_shift``, AUC ≥ ``min_auc`` or abstentions ≥ 1.5x).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict


@dataclass
class DriftResult:
    """The figures of one drift check and the verdict."""

    n_recent: int
    n_reference: int
    mean_shift: float
    mean_shift_p: float
    c2st_auc: float
    c2st_p: float
    abstain_rate_recent: float | None
    abstain_rate_train: float | None
    abstain_p: float | None
    drifted: bool
    reasons: list[str]


def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x)
    return x / norm if norm > 0 else x


def cosine_shift(recent: np.ndarray, reference: np.ndarray) -> float:
    """1 - cos(mean(recent), mean(reference))."""
    return float(1.0 - _unit(recent.mean(axis=0)) @ _unit(reference.mean(axis=0)))


def mean_shift_test(recent: np.ndarray, reference: np.ndarray, n_permutations: int = 500, seed: int = 0) -> tuple[float, float]:
    """The cosine shift of the means and its permutation p-value."""
    observed = cosine_shift(recent, reference)
    pooled = np.vstack([recent, reference])
    n = len(recent)
    rng = np.random.default_rng(seed)
    exceed = 0
    for _ in range(n_permutations):
        idx = rng.permutation(len(pooled))
        exceed += cosine_shift(pooled[idx[:n]], pooled[idx[n:]]) >= observed
    return observed, (1 + exceed) / (1 + n_permutations)


def c2st(recent: np.ndarray, reference: np.ndarray, folds: int = 5, seed: int = 0) -> tuple[float, float]:
    """Out-of-fold AUC of a logistic regression separating recent (1) from reference (0), and its p-value."""
    x = np.vstack([recent, reference])
    y = np.concatenate([np.ones(len(recent)), np.zeros(len(reference))])
    folds = max(2, min(folds, len(recent), len(reference)))
    model = LogisticRegression(C=1.0, max_iter=500)
    scores = cross_val_predict(model, x, y, cv=StratifiedKFold(folds, shuffle=True, random_state=seed), method="predict_proba")[:, 1]
    auc = float(roc_auc_score(y, scores))
    n1, n0 = len(recent), len(reference)
    u = auc * n1 * n0
    mean, sd = n1 * n0 / 2, np.sqrt(n1 * n0 * (n1 + n0 + 1) / 12)
    p = float(stats.norm.sf((u - mean) / sd))  # one-sided: only AUC above 0.5 is drift
    return auc, p


def detect(
    recent: np.ndarray,
    reference: np.ndarray,
    *,
    abstained: int | None = None,
    requests: int | None = None,
    train_abstain_rate: float | None = None,
    alpha: float = 0.01,
    min_shift: float = 0.02,
    min_auc: float = 0.65,
    n_permutations: int = 500,
    seed: int = 0,
) -> DriftResult:
    """Run the three checks and give the verdict (see the module docstring).

    Args:
        recent, reference: L2-normalised embeddings (rows) of recent and training questions.
        abstained, requests: recent abstentions out of routed requests.
        train_abstain_rate: the abstention rate the router's threshold was calibrated for.
    """
    if len(recent) < 10 or len(reference) < 10:
        raise ValueError(f"drift needs at least 10 recent and 10 reference questions; got {len(recent)} and {len(reference)}")
    shift, shift_p = mean_shift_test(recent, reference, n_permutations, seed)
    auc, auc_p = c2st(recent, reference, seed=seed)
    reasons = []
    if shift_p < alpha and shift >= min_shift:
        reasons.append(f"mean embedding moved by cosine distance {shift:.3f} (permutation p = {shift_p:.3g})")
    if auc_p < alpha and auc >= min_auc:
        reasons.append(f"a classifier tells recent from training questions apart (AUC {auc:.2f}, p = {auc_p:.2g})")
    rate = abstain_p = None
    if requests and abstained is not None and train_abstain_rate is not None and 0 < train_abstain_rate < 1:
        rate = abstained / requests
        abstain_p = float(stats.binomtest(abstained, requests, train_abstain_rate, alternative="greater").pvalue)
        if abstain_p < alpha and rate >= 1.5 * train_abstain_rate:
            reasons.append(f"the router abstains on {rate:.1%} of questions against {train_abstain_rate:.1%} at training (p = {abstain_p:.2g})")
    return DriftResult(len(recent), len(reference), shift, shift_p, auc, auc_p, rate, train_abstain_rate, abstain_p, bool(reasons), reasons)


@dataclass
class UncoveredCluster:
    """A dense group of recent questions far from every expert: a candidate new expert."""

    members: list[int]
    nearest_expert: int | None
    similarity: float


def uncovered_clusters(
    x: np.ndarray, expert_centroids: np.ndarray, *, eps: float = 0.3, min_samples: int = 8, max_similarity: float = 0.45,
) -> list[UncoveredCluster]:
    """Dense clusters of ``x`` (DBSCAN, cosine distance) whose centroid is not close to any expert's centroid.

    Args:
        x: L2-normalised embeddings of recent questions.
        expert_centroids: one L2-normalised row per expert (may be empty: then every dense cluster is uncovered).
        eps, min_samples: DBSCAN's density (cosine distance radius, neighbours); a cluster needs ``min_samples`` questions.
        max_similarity: a cluster whose centroid has cosine similarity below this to every expert is "uncovered".
    Returns:
        The uncovered clusters, largest first.
    """
    from sklearn.cluster import DBSCAN

    if len(x) < min_samples:
        return []
    labels = DBSCAN(eps=eps, min_samples=min_samples, metric="cosine").fit_predict(x)
    out = []
    for label in sorted(set(labels) - {-1}):
        members = np.flatnonzero(labels == label)
        centroid = _unit(x[members].mean(axis=0))
        if len(expert_centroids):
            sims = expert_centroids @ centroid
            nearest, similarity = int(sims.argmax()), float(sims.max())
        else:
            nearest, similarity = None, 0.0
        if similarity < max_similarity:
            out.append(UncoveredCluster([int(i) for i in members], nearest, similarity))
    return sorted(out, key=lambda c: -len(c.members))
