"""Grouping DBSCAN's fine topics into expert proposals, and naming them.

``group_topics`` merges fine topics into a handful of expert proposals (weighted Ward on topic
centroids, refined by spherical k-means, topics kept whole).
``describe_groups`` names groups by class-based TF-IDF keywords and representative queries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from sklearn.cluster import AgglomerativeClustering
from sklearn.feature_extraction.text import TfidfVectorizer

from labeling.ml.pair_labels import NOISE
from labeling.ml.radius import normalise


@dataclass
class TopicSummary:
    """A topic's size, keywords and the queries closest to its centroid."""

    label: int
    size: int
    keywords: list[str]
    representatives: list[int]


def topic_centroids(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normalised centroid of each non-noise label; returns (labels, centroids)."""
    x = normalise(x)
    ids = np.array(sorted(set(labels.tolist()) - {NOISE}), dtype=int)
    cents = np.stack([x[labels == i].mean(axis=0) for i in ids]) if ids.size else np.zeros((0, x.shape[1]), np.float32)
    return ids, normalise(cents) if ids.size else cents


def weighted_ward(points: np.ndarray, weights: np.ndarray, n_clusters: int) -> np.ndarray:
    """Agglomerative Ward clustering of weighted points into ``n_clusters``; returns a label per point.

    The cost of merging A and B is ``w_A w_B / (w_A + w_B) * |c_A - c_B|²`` (c: weighted means), the
    growth of the weighted within-cluster sum of squares, updated by the Lance-Williams formula. A
    point of weight w behaves like w coincident points, which sklearn's Ward cannot express.
    Memory is m² floats for m points: meant for topic centroids (hundreds to a few thousand).
    """
    c = np.asarray(points, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    m = c.shape[0]
    if n_clusters >= m:
        return np.arange(m)
    sq = (c * c).sum(axis=1)
    cost = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (c @ c.T), 0.0)
    cost *= (w[:, None] * w[None, :]) / (w[:, None] + w[None, :])
    np.fill_diagonal(cost, np.inf)
    size = w.copy()
    active = np.ones(m, dtype=bool)
    owner = np.arange(m)
    nn = np.argmin(cost, axis=1)
    nn_cost = cost[np.arange(m), nn]
    for _ in range(m - max(1, n_clusters)):
        a = int(np.argmin(nn_cost))
        b = int(nn[a])
        with np.errstate(invalid="ignore"):
            new = ((size[a] + size) * cost[a] + (size[b] + size) * cost[b] - size * cost[a, b]) / (size[a] + size[b] + size)
        new[~active] = np.inf
        new[[a, b]] = np.inf
        cost[a, :] = new
        cost[:, a] = new
        cost[b, :] = np.inf
        cost[:, b] = np.inf
        size[a] += size[b]
        active[b] = False
        nn_cost[b] = np.inf
        owner[owner == b] = a
        stale = np.flatnonzero(active & ((nn == a) | (nn == b)))
        stale = np.union1d(stale, [a])
        nn[stale] = np.argmin(cost[stale], axis=1)
        nn_cost[stale] = cost[stale, nn[stale]]
        better = active & (new < nn_cost)
        nn[better] = a
        nn_cost[better] = new[better]
    _, labels = np.unique(owner, return_inverse=True)
    return labels


def _group_centroids(x: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    onehot = sparse.csr_matrix((np.ones(groups.size, dtype=np.float32), (groups, np.arange(groups.size))), shape=(n_groups, groups.size))
    return normalise(np.asarray(onehot @ x))


def spherical_kmeans(x: np.ndarray, groups: np.ndarray, n_groups: int, max_iter: int = 50) -> tuple[np.ndarray, float]:
    """Lloyd iterations with cosine distance from the partition ``groups``; returns (groups, inertia).

    Inertia is the total cosine distance of the points to their group's normalised centroid. Stops
    when nothing moves, or before a step would leave a group empty.
    """
    groups = np.asarray(groups, dtype=int)
    for _ in range(max_iter):
        new = np.argmax(x @ _group_centroids(x, groups, n_groups).T, axis=1)
        if np.array_equal(new, groups) or np.bincount(new, minlength=n_groups).min() == 0:
            break
        groups = new
    gc = _group_centroids(x, groups, n_groups)
    return groups, float(x.shape[0] - np.einsum("ij,ij->", x, gc[groups]))


def group_topics(x: np.ndarray, labels: np.ndarray, n_groups: int) -> np.ndarray:
    """Merge fine topics into ``n_groups`` proposals; returns a proposal index per row (0 = largest).

    Every topic lands wholly in one proposal. Steps:

    1. The topics' centroids are merged by weighted Ward (``weighted_ward``) with topic sizes to the
       power 0, 1/2 and 1 (which suits the data is not known in advance).
    2. Each candidate seeds spherical k-means over the points; the smallest total cosine distance to
       the proposal centroids (k-means' own objective: no labels, no tuned constant) wins.
    3. Each topic joins, whole, the proposal closest to its members in total, and each noise point its
       nearest proposal.
    """
    x = normalise(x)
    labels = np.asarray(labels)
    ids, cents = topic_centroids(x, labels)
    if ids.size == 0:
        # No topics at all: plain spherical k-means, seeded by k-means++.
        from sklearn.cluster import KMeans

        k = max(1, min(n_groups, x.shape[0]))
        return KMeans(n_clusters=k, n_init=3, random_state=0).fit_predict(x)
    n_groups = max(1, min(n_groups, ids.size))
    position = np.full(int(labels.max()) + 1, -1, dtype=int)
    position[ids] = np.arange(ids.size)
    member = labels != NOISE
    topic_of = np.full(labels.size, -1, dtype=int)
    topic_of[member] = position[labels[member]]
    # Noise starts at its nearest topic.
    nearest_topic = topic_of.copy()
    noise = np.flatnonzero(~member)
    if noise.size:
        nearest_topic[noise] = np.argmax(x[noise] @ cents.T, axis=1)
    sizes = np.bincount(topic_of[member], minlength=ids.size).astype(np.float64)
    best: tuple[float, np.ndarray] | None = None
    for power in (0.0, 0.5, 1.0):
        topic_group = weighted_ward(cents, sizes**power, n_groups) if n_groups > 1 else np.zeros(ids.size, dtype=int)
        groups, inertia = spherical_kmeans(x, topic_group[nearest_topic], n_groups)
        if best is None or inertia < best[0] - 1e-6:
            best = (inertia, groups)
    assert best is not None
    gc = _group_centroids(x, best[1], n_groups)
    out = np.full(labels.size, NOISE, dtype=int)
    topic_sums = np.asarray(sparse.csr_matrix(
        (np.ones(int(member.sum()), dtype=np.float32), (topic_of[member], np.flatnonzero(member))), shape=(ids.size, labels.size)
    ) @ x)
    out[member] = np.argmax(topic_sums @ gc.T, axis=1)[topic_of[member]]
    if noise.size:
        out[noise] = np.argmax(x[noise] @ gc.T, axis=1)
    return by_size(out)  # any proposal the last step left empty is dropped


def by_size(groups: np.ndarray) -> np.ndarray:
    """Groups renumbered largest first (``-1`` kept), empty ones dropped."""
    out = np.full(groups.shape, NOISE, dtype=int)
    kept = groups != NOISE
    if not kept.any():
        return out
    ids, counts = np.unique(groups[kept], return_counts=True)
    order = ids[np.argsort(-counts, kind="stable")]
    rank = {int(g): r for r, g in enumerate(order)}
    out[kept] = [rank[int(g)] for g in groups[kept]]
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
    x = normalise(x)
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
        centroid = normalise(x[members].mean(axis=0, keepdims=True))[0]
        order = members[np.argsort(-(x[members] @ centroid))][:n_representatives]
        keywords: list[str] = []
        if tfidf is not None:
            weights = tfidf[row].toarray()[0]
            keywords = [str(vocab[i]) for i in np.argsort(-weights)[:n_keywords] if weights[i] > 0]
        out.append(TopicSummary(label=gid, size=int(members.size), keywords=keywords, representatives=[int(i) for i in order]))
    return out
