"""DBSCAN's labels read from a list of neighbour pairs: core points, connected components, border points.

What ``SparseDBSCAN`` labels with, and what the eps sweep scores each radius it tries with.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components

NOISE = -1


def dbscan_from_pairs(
    n: int, i: np.ndarray, j: np.ndarray, min_samples: int, degree: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """DBSCAN labels from the list of neighbour pairs ``i < j`` (self-pairs implied); returns (labels, core mask).

    Gives exactly sklearn's ``DBSCAN`` labels: a point is core when it has at least ``min_samples``
    neighbours counting itself; clusters are the connected components of core points, numbered in the
    order of their lowest-index core point; a border point joins the lowest-numbered cluster among
    its core neighbours (the cluster sklearn's depth-first expansion reaches it from first).

    ``degree`` (neighbours counting itself) overrides the count from the pairs, for pair lists that
    keep only some of each row's neighbours (``capped_pass``): core points stay exact, clusters
    are then the components of the kept pairs.
    """
    if degree is None:
        degree = np.bincount(i, minlength=n) + np.bincount(j, minlength=n) + 1
    core = degree >= min_samples
    labels = np.full(n, NOISE, dtype=np.intp)
    if not core.any():
        return labels, core
    both = core[i] & core[j]
    core_idx = np.flatnonzero(core)
    position = np.full(n, -1, dtype=np.int64)
    position[core_idx] = np.arange(core_idx.size)
    m = core_idx.size
    adjacency = sparse.csr_matrix(
        (np.ones(int(both.sum()), dtype=np.int8), (position[i[both]], position[j[both]])), shape=(m, m)
    )
    _, component = connected_components(adjacency, directed=False)
    # Renumber components by their lowest core index (core_idx is ascending, so first occurrence wins).
    _, first = np.unique(component, return_index=True)
    order = np.empty(first.size, dtype=np.intp)
    order[np.argsort(first)] = np.arange(first.size)
    labels[core_idx] = order[component]
    # Border points: non-core with at least one core neighbour take the smallest such cluster label.
    border_i = core[j] & ~core[i]
    border_j = core[i] & ~core[j]
    b = np.concatenate([i[border_i], j[border_j]])
    lab = np.concatenate([labels[j[border_i]], labels[i[border_j]]])
    if b.size:
        best = np.full(n, np.iinfo(np.intp).max, dtype=np.intp)
        np.minimum.at(best, b, lab)
        hit = best != np.iinfo(np.intp).max
        labels[hit] = best[hit]
    return labels, core


def complete_borders(x: np.ndarray, labels: np.ndarray, core: np.ndarray, reach: np.ndarray, i: np.ndarray, j: np.ndarray, eps: float) -> None:
    """Give border points whose pairs a capped pass dropped the label DBSCAN gives them (in place).

    A non-core point whose count (``reach``, self included, an upper bound) says it may have more
    neighbours than its kept pairs show may lie within ``eps`` of a core point whose list was
    capped: its neighbours are recomputed exactly.
    """
    n = x.shape[0]
    kept = np.bincount(i, minlength=n) + np.bincount(j, minlength=n) + 1
    doubtful = np.flatnonzero(~core & (labels == NOISE) & (reach > kept))
    for start in range(0, doubtful.size, 256):
        rows = doubtful[start : start + 256]
        sims = x[rows] @ x.T
        within = (sims >= np.float32(1.0 - eps)) & core[None, :]
        for row, hits in zip(rows, within, strict=True):
            found = labels[np.flatnonzero(hits)]
            if found.size:
                labels[row] = found.min()

