"""Discovering topics and expert proposals from query embeddings.

``SparseDBSCAN`` is DBSCAN over L2-normalised embeddings with cosine distance, computed on a sparse
radius-neighbour graph: neighbours are found in blocks (a matrix product per block of rows) and only
pairs within ``eps`` are kept, so memory grows with the number of close pairs, not with n². An
optional PCA reduction makes each block cheaper on large inputs.

``suggest_eps`` reads the knee of the sorted k-distance curve. ``group_topics`` merges DBSCAN's
fine topics into a handful of expert proposals by agglomerative clustering of topic centroids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.cluster import DBSCAN, AgglomerativeClustering
from sklearn.decomposition import PCA
from sklearn.feature_extraction.text import TfidfVectorizer

NOISE = -1


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


def knn_cosine_distances(x: np.ndarray, k: int, block: int = 2048) -> np.ndarray:
    """Cosine distance to each row's k nearest other rows, shape (n, k), ascending."""
    x = _normalise(x)
    n = x.shape[0]
    k = min(k, n - 1)
    out = np.empty((n, k), dtype=np.float32)
    for start in range(0, n, block):
        sims = x[start : start + block] @ x.T
        rows = np.arange(sims.shape[0])
        sims[rows, start + rows] = -np.inf  # exclude self
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(sims, part, axis=1)
        out[start : start + block] = np.sort(1.0 - top, axis=1)
    return out


def suggest_eps(x: np.ndarray, min_samples: int = 5, sample: int = 5000, seed: int = 0) -> float:
    """Suggest DBSCAN's ``eps`` (cosine distance) from the knee of the k-distance curve.

    The curve is each point's distance to its ``min_samples``-th neighbour, sorted ascending; the knee
    is the point farthest from the chord joining its ends (the "kneedle" rule).
    """
    x = np.asarray(x)
    if x.shape[0] > sample:
        idx = np.random.default_rng(seed).choice(x.shape[0], sample, replace=False)
        x = x[idx]
    if x.shape[0] <= min_samples:
        return 0.3
    kd = np.sort(knn_cosine_distances(x, min_samples)[:, -1])
    n = kd.shape[0]
    xs = np.linspace(0.0, 1.0, n)
    span = kd[-1] - kd[0]
    ys = (kd - kd[0]) / span if span > 0 else np.zeros_like(kd)
    knee = int(np.argmax(xs - ys))  # curve is convex and increasing: the knee is farthest below the chord
    return float(max(kd[knee], 1e-3))


def radius_graph(x: np.ndarray, eps: float, block: int = 2048) -> sparse.csr_matrix:
    """Sparse matrix of cosine distances for all pairs within ``eps`` (self-pairs included)."""
    x = _normalise(x)
    n = x.shape[0]
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    min_sim = 1.0 - eps
    for start in range(0, n, block):
        sims = x[start : start + block] @ x.T
        r, c = np.nonzero(sims >= min_sim)
        rows.append(r + start)
        cols.append(c)
        # Stored distances must be > 0 to survive as explicit entries; clip self-distances to a tiny value.
        vals.append(np.maximum(1.0 - sims[r, c], 1e-9).astype(np.float32))
    return sparse.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n), dtype=np.float32
    )


class SparseDBSCAN(ClusterMixin, BaseEstimator):
    """DBSCAN with cosine distance on a sparse radius-neighbour graph.

    Args:
        eps: neighbourhood radius in cosine distance; ``None`` picks ``suggest_eps``.
        min_samples: points within ``eps`` (self included) for a core point.
        n_components: reduce to this many PCA dimensions first (``None`` keeps all).
        block: rows per similarity block (bounds the working memory to ``block × n`` floats).
    """

    def __init__(self, eps: float | None = None, min_samples: int = 5, n_components: int | None = None, block: int = 2048, random_state: int = 0):
        self.eps = eps
        self.min_samples = min_samples
        self.n_components = n_components
        self.block = block
        self.random_state = random_state

    def fit(self, X: np.ndarray, y: None = None) -> SparseDBSCAN:
        X = _normalise(np.asarray(X))
        if X.ndim != 2 or X.shape[0] == 0:
            raise ValueError("X must be a non-empty 2-D array of embeddings")
        if self.n_components and self.n_components < X.shape[1] and X.shape[0] > self.n_components:
            X = _normalise(PCA(n_components=self.n_components, random_state=self.random_state).fit_transform(X))
        self.eps_ = float(self.eps) if self.eps is not None else suggest_eps(X, self.min_samples, seed=self.random_state)
        graph = radius_graph(X, self.eps_, block=self.block)
        model = DBSCAN(eps=self.eps_, min_samples=self.min_samples, metric="precomputed")
        self.labels_ = model.fit_predict(graph)
        self.core_sample_indices_ = model.core_sample_indices_
        self.n_clusters_ = int(self.labels_.max() + 1) if self.labels_.size else 0
        return self


@dataclass
class TopicSummary:
    """A topic's size, keywords and the queries closest to its centroid."""

    label: int
    size: int
    keywords: list[str]
    representatives: list[int]


def topic_centroids(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normalised centroid of each non-noise label; returns (labels, centroids)."""
    x = _normalise(x)
    ids = np.array(sorted(set(labels.tolist()) - {NOISE}), dtype=int)
    cents = np.stack([x[labels == i].mean(axis=0) for i in ids]) if ids.size else np.zeros((0, x.shape[1]), np.float32)
    return ids, _normalise(cents) if ids.size else cents


def group_topics(x: np.ndarray, labels: np.ndarray, n_groups: int, assign_noise: bool = True) -> np.ndarray:
    """Merge fine topics into ``n_groups`` proposals; returns a proposal index per row.

    Topics are grouped by average-linkage agglomerative clustering of their centroids (cosine),
    weighted implicitly by keeping each centroid once. Noise points join the nearest proposal when
    ``assign_noise`` is true, else keep ``-1``.
    """
    x = _normalise(x)
    ids, cents = topic_centroids(x, labels)
    if ids.size == 0:
        # No topics at all: fall back to grouping the points themselves.
        cents, ids = x, np.arange(x.shape[0])
        labels = ids.copy()
    n_groups = max(1, min(n_groups, ids.size))
    if ids.size == 1:
        topic_group = np.zeros(1, dtype=int)
    else:
        topic_group = AgglomerativeClustering(n_clusters=n_groups, metric="cosine", linkage="average").fit_predict(cents)
    mapping = dict(zip(ids.tolist(), topic_group.tolist(), strict=True))
    out = np.array([mapping.get(int(lbl), NOISE) for lbl in labels], dtype=int)
    if assign_noise and (out == NOISE).any():
        group_ids = np.unique(topic_group)
        group_cents = _normalise(np.stack([cents[topic_group == g].mean(axis=0) for g in group_ids]))
        noise = np.nonzero(out == NOISE)[0]
        out[noise] = group_ids[np.argmax(x[noise] @ group_cents.T, axis=1)]
    return out


def suggest_n_groups(x: np.ndarray, labels: np.ndarray, low: int = 4, high: int = 16) -> int:
    """Suggest a number of experts: the silhouette-best cut of the topic tree within [low, high]."""
    from sklearn.metrics import silhouette_score

    ids, cents = topic_centroids(x, labels)
    if ids.size <= low:
        return max(1, int(ids.size))
    best, best_k = -2.0, low
    for k in range(low, min(high, ids.size - 1) + 1):
        groups = AgglomerativeClustering(n_clusters=k, metric="cosine", linkage="average").fit_predict(cents)
        if len(set(groups.tolist())) < 2:
            continue
        score = silhouette_score(cents, groups, metric="cosine")
        if score > best:
            best, best_k = score, k
    return best_k


def describe_groups(texts: list[str], x: np.ndarray, groups: np.ndarray, n_keywords: int = 6, n_representatives: int = 5) -> list[TopicSummary]:
    """Keywords (class-based TF-IDF) and representative queries for every group."""
    x = _normalise(x)
    ids = [int(g) for g in sorted(set(groups.tolist())) if g != NOISE]
    if not ids:
        return []
    docs = [" ".join(t for t, g in zip(texts, groups, strict=True) if g == gid) for gid in ids]
    vectorizer = TfidfVectorizer(stop_words="english", max_features=20000, ngram_range=(1, 2), min_df=1, sublinear_tf=True)
    try:
        tfidf = vectorizer.fit_transform(docs)
        vocab = np.array(vectorizer.get_feature_names_out())
    except ValueError:  # only stop words
        tfidf, vocab = None, np.array([])
    out = []
    for row, gid in enumerate(ids):
        members = np.nonzero(groups == gid)[0]
        centroid = _normalise(x[members].mean(axis=0, keepdims=True))[0]
        order = members[np.argsort(-(x[members] @ centroid))][:n_representatives]
        keywords: list[str] = []
        if tfidf is not None:
            weights = tfidf[row].toarray()[0]
            keywords = [str(vocab[i]) for i in np.argsort(-weights)[:n_keywords] if weights[i] > 0]
        out.append(TopicSummary(label=gid, size=int(members.size), keywords=keywords, representatives=[int(i) for i in order]))
    return out
