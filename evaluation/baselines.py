"""``evaluate router``'s baselines at full strength, on the router's own embeddings.

``LogRegMethod`` (C chosen on validation, ``routing.ml.linear.fit_linear``) and ``KnnMethod`` (k and
the aggregation, ``vote`` or ``mean``, chosen on validation). Every choice is the best validation
macro-F1, never a test figure. ``fit_baselines`` fits each on the training questions and again with
the router's typo copies (``logreg_typos``, ``knn_typos``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from routing.ml.linear import LINEAR_CS, fit_linear

KNN_KS = (1, 3, 5, 10, 20)
KNN_KINDS = ("vote", "mean")
CHUNK = 512  # query rows per similarity block (a block of 512 x 30,000 cosines is ~60 MB)


def _macro_f1(y: np.ndarray, pred: np.ndarray) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y, pred, average="macro", zero_division=0))


class LogRegMethod:
    """Logistic regression on the embeddings, C among ``cs`` by validation macro-F1; in-scope score: the highest probability."""

    def __init__(self, cs: tuple[float, ...] = LINEAR_CS, seed: int = 0):
        self.cs, self.seed = cs, seed

    def fit(self, x: np.ndarray, y: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, n: int) -> LogRegMethod:
        self.model_, self.choice_ = fit_linear(x, y, x_val, y_val, self.cs, self.seed)
        self.n_ = n
        return self

    def scores(self, x: np.ndarray, texts: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        probs = np.zeros((len(x), self.n_))
        probs[:, self.model_.classes_] = self.model_.predict_proba(np.atleast_2d(x))
        return probs, probs.max(axis=1)


class KnnMethod:
    """Nearest-example routing with ``k`` neighbours and one of ``KNN_KINDS`` (see the module)."""

    def __init__(self, k: int = 5, kind: str = "mean"):
        if kind not in KNN_KINDS:
            raise ValueError(f"kind must be one of {', '.join(KNN_KINDS)}, got {kind!r}")
        self.k, self.kind = k, kind

    def fit(self, x: np.ndarray, y: np.ndarray, n: int) -> KnnMethod:
        self.bank_ = np.ascontiguousarray(x, dtype=np.float32)
        self.y_ = np.asarray(y)
        self.members_ = [np.nonzero(self.y_ == i)[0] for i in range(n)]
        return self

    def scores(self, x: np.ndarray, texts: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.grid(x, (self.k,), (self.kind,))[(self.kind, self.k)]

    def grid(self, x: np.ndarray, ks: tuple[int, ...], kinds: tuple[str, ...]) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
        """Each (kind, k)'s label scores and in-scope scores of ``x``, ``CHUNK`` rows at a time."""
        x = np.atleast_2d(x).astype(np.float32)
        blocks = [_knn_grid(x[start:start + CHUNK] @ self.bank_.T, self.y_, self.members_, ks, kinds) for start in range(0, len(x), CHUNK)]
        empty = (np.zeros((0, len(self.members_))), np.zeros(0))
        return {(kind, k): (np.vstack([b[(kind, k)][0] for b in blocks]), np.concatenate([b[(kind, k)][1] for b in blocks])) if blocks else empty
                for kind in kinds for k in ks}


def _knn_grid(sims: np.ndarray, y: np.ndarray, members: list[np.ndarray], ks: tuple[int, ...], kinds: tuple[str, ...]) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """Each (kind, k)'s label scores (rows, n) and in-scope scores (rows,) from one block of cosines (rows, bank)."""
    rows, n, top = sims.shape[0], len(members), max(ks)
    out: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
    if "vote" in kinds:
        m = min(top, sims.shape[1])
        idx = np.argpartition(-sims, m - 1, axis=1)[:, :m]
        near = np.take_along_axis(sims, idx, axis=1)
        order = np.argsort(-near, axis=1)
        idx, near = np.take_along_axis(idx, order, axis=1), np.take_along_axis(near, order, axis=1)
        labels = y[idx]
        for k in ks:
            votes = np.zeros((rows, n))
            for j in range(min(k, m)):
                np.add.at(votes, (np.arange(rows), labels[:, j]), near[:, j])
            out[("vote", k)] = (votes / min(k, m), near[:, 0].copy())
    if "mean" in kinds:
        cumulative = np.zeros((rows, n, top))
        counts = np.zeros((n, top))
        for i, rows_of in enumerate(members):
            part = sims[:, rows_of]
            m = min(top, part.shape[1])
            best = -np.sort(-np.partition(part, part.shape[1] - m, axis=1)[:, -m:], axis=1)
            sums = np.cumsum(best, axis=1)
            cumulative[:, i, :m] = sums
            cumulative[:, i, m:] = sums[:, -1:]
            counts[i] = np.minimum(np.arange(1, top + 1), m)
        for k in ks:
            means = cumulative[:, :, k - 1] / counts[:, k - 1]
            out[("mean", k)] = (means, means.max(axis=1))
    return out


def choose_knn(x: np.ndarray, y: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, n: int,
               ks: tuple[int, ...] = KNN_KS, kinds: tuple[str, ...] = KNN_KINDS) -> tuple[KnnMethod, dict[str, Any]]:
    """The (kind, k) with the best validation macro-F1 (ties: the first of the grid), fitted on ``x``."""
    knn = KnnMethod().fit(x, y, n)
    tried = []
    for (kind, k), (scores, _) in knn.grid(x_val, ks, kinds).items():
        pred = scores.argmax(axis=1)
        tried.append({"kind": kind, "k": k, "val_macro_f1": _macro_f1(y_val, pred), "val_accuracy": float((pred == y_val).mean()) if len(pred) else 0.0})
    best = max(tried, key=lambda r: r["val_macro_f1"])  # max keeps the first of equals
    knn.k, knn.kind = best["k"], best["kind"]
    return knn, {**best, "tried": tried}


def fit_baselines(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, n: int,
                  augmented: tuple[np.ndarray, np.ndarray] | None, seed: int = 0) -> dict[str, tuple[Any, float]]:
    """``logreg`` and ``knn`` fitted on the training questions, and ``logreg_typos`` and ``knn_typos`` on
    ``augmented`` (the training questions and their typo copies, embeddings and labels) when given.

    Returns ``{name: (method, train_s)}``; each method's ``choice_`` holds its validation choice.
    """
    sets = {"": (x_train, y_train)}
    if augmented is not None:
        sets["_typos"] = augmented
    fitted: dict[str, tuple[Any, float]] = {}
    for suffix, (x, y) in sets.items():
        t = time.perf_counter()
        fitted[f"logreg{suffix}"] = (LogRegMethod(seed=seed).fit(x, y, x_val, y_val, n), time.perf_counter() - t)
        t = time.perf_counter()
        knn, choice = choose_knn(x, y, x_val, y_val, n)
        knn.choice_ = choice  # type: ignore[attr-defined]
        fitted[f"knn{suffix}"] = (knn, time.perf_counter() - t)
    return fitted
