"""Discovery as the product runs it: DBSCAN's topics → the number of experts → proposals → noise.

``discover`` is the one pipeline behind the console's "start a run", the monthly re-clustering and
``manage.py evaluate clustering`` (its ``ours_product``). Topics come from ``SparseDBSCAN``, K is given
or suggested from the topics (``suggest_n_groups``), proposals are made by one of ``GROUPINGS``
(``smoothed_kmeans``: each query replaced by the mean of itself and its ``NEIGHBOURS`` nearest, then
k-means; ``topics``: ``group_topics``) and noise is attached or left out (``NOISE_MODES``). The
defaults were chosen by ARI on the train splits of clinc150 and hwu64 (``evaluate clustering --split
train --variants``; figures in docs/EVALUATIONS.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dbscan import SparseDBSCAN
from .grouping import by_size, group_topics, suggest_n_groups
from .pair_labels import NOISE
from .radius import normalise

GROUPINGS = ("topics", "smoothed_kmeans")
NOISE_MODES = ("attach", "leave")
# Chosen on the train splits of clinc150 and hwu64 (see the module docstring).
DEFAULT_GROUPING = "smoothed_kmeans"
DEFAULT_NOISE = "attach"
NEIGHBOURS = 10
KMEANS_STARTS = 10


@dataclass
class Discovery:
    """What discovery found: DBSCAN's topics, the proposals and how they were made."""

    topics: np.ndarray  # DBSCAN label per query at the fit's radius, -1 for noise
    groups: np.ndarray  # proposal per query (0 = largest), -1 for a query left out of every proposal
    n_groups: int  # K asked for
    k_suggested: bool  # K came from the data (``suggest_n_groups``), not from the caller
    topic_eps: float  # the radius whose topics the proposals were grouped from
    grouping: str
    noise: str


def neighbour_means(x: np.ndarray, k: int = NEIGHBOURS, budget_bytes: int = 128 << 20) -> np.ndarray:
    """Each row replaced by the normalised mean of itself and its ``k`` nearest other rows (cosine).

    Computed block by block (one product of a block of rows with all rows), so the working memory
    stays near ``budget_bytes`` whatever n; time is that of one pass over all pairs.
    """
    x = normalise(x)
    n = x.shape[0]
    k = max(0, min(k, n - 1))
    if k == 0:
        return x
    out = np.empty_like(x)
    block = max(1, min(n, budget_bytes // (4 * max(n, 1))))
    for start in range(0, n, block):
        rows = np.arange(start, min(n, start + block))
        sims = x[rows] @ x.T
        sims[np.arange(rows.size), rows] = np.inf  # itself first, whatever duplicates it has
        nearest = np.argpartition(-sims, k, axis=1)[:, : k + 1]
        out[rows] = x[nearest].mean(axis=1)
    return normalise(out)


def smoothed_kmeans(x: np.ndarray, n_groups: int, neighbours: int = NEIGHBOURS, starts: int = KMEANS_STARTS, seed: int = 0) -> np.ndarray:
    """K-means (``starts`` k-means++ starts, lowest objective wins) on the neighbour means of ``x``."""
    from sklearn.cluster import KMeans

    z = neighbour_means(x, neighbours)
    k = max(1, min(n_groups, z.shape[0]))
    return KMeans(n_clusters=k, n_init=starts, random_state=seed).fit_predict(z)


def group(x: np.ndarray, topics: np.ndarray, n_groups: int, grouping: str = DEFAULT_GROUPING, seed: int = 0) -> np.ndarray:
    """Proposals from topics by ``grouping``, every query assigned: the proposal per row."""
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {', '.join(GROUPINGS)}, not {grouping!r}")
    if grouping == "topics":
        return group_topics(x, topics, n_groups)
    return smoothed_kmeans(x, n_groups, seed=seed)


def discover(
    x: np.ndarray, model: SparseDBSCAN, n_groups: int | None = None, grouping: str = DEFAULT_GROUPING, noise: str = DEFAULT_NOISE,
    topics: np.ndarray | None = None, seed: int = 0,
) -> Discovery:
    """Expert proposals from a fitted ``SparseDBSCAN`` (or other ``topics`` for the same ``x``), as the product makes them.

    Args:
        x: the queries' embeddings (normalised here).
        model: the fitted DBSCAN; its ``labels_`` are the topics unless ``topics`` is given.
        n_groups: proposals to make; ``None`` suggests it from the topics (``suggest_n_groups``).
        grouping: one of ``GROUPINGS``.
        noise: ``attach`` (every query in a proposal) or ``leave`` (DBSCAN's noise in none).
        topics: topics from another clusterer (the evaluation's HDBSCAN through the same steps).
        seed: seed of the k-means starts.
    """
    if noise not in NOISE_MODES:
        raise ValueError(f"noise must be one of {', '.join(NOISE_MODES)}, not {noise!r}")
    x = normalise(x)
    own = topics is None
    topics = model.labels_ if topics is None else np.asarray(topics)
    suggested = n_groups is None
    k = int(suggest_n_groups(x, topics)) if n_groups is None else int(n_groups)
    groups = group(x, topics, k, grouping, seed)
    if noise == "leave":
        groups = np.where(topics == NOISE, NOISE, groups)
    return Discovery(topics=topics, groups=by_size(groups), n_groups=k, k_suggested=suggested,
                     topic_eps=float(model.eps_) if own else float("nan"), grouping=grouping, noise=noise)
