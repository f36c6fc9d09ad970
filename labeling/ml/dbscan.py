"""``SparseDBSCAN``: DBSCAN over L2-normalised embeddings with cosine distance, with exactly sklearn's labels.

The pairs come from ``labeling.ml.radius``, the radius when not given from ``labeling.ml.eps_sweep``,
the clusters from ``labeling.ml.pair_labels``; grouping topics into proposals is ``labeling.ml.grouping``.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin

from .eps_sweep import SWEEP_MAX_PAIRS, pairs_at, sweep
from .pair_labels import complete_borders, dbscan_from_pairs
from .radius import normalise


class SparseDBSCAN(ClusterMixin, BaseEstimator):
    """DBSCAN with cosine distance on a sparse radius-neighbour graph; the same labels as sklearn's.

    The pairs within ``eps`` are found block by block (``radius_pairs``) and the clusters read from
    them (``dbscan_from_pairs``), never from neighbourhood lists: memory is ``budget_bytes`` plus about
    12 bytes per close pair. With ``eps=None`` the eps sweep chooses the radius from the same pass.

    Args:
        eps: neighbourhood radius in cosine distance; ``None``: the eps sweep's.
        min_samples: points within ``eps`` (self included) for a core point.
        block: rows per similarity block; ``None`` sizes blocks to ``budget_bytes``.
        random_state: seed for the eps sample.
        budget_bytes: working memory for one block of similarities when ``block`` is ``None``.
        precision: ``"auto"``, ``"float32"`` or ``"bfloat16"`` products (see ``radius_pairs``); the
            labels are those of float32 distances in every case.
        max_pairs: most neighbour pairs to hold; past it each row keeps only its nearest pairs
            (``capped_pass``: exact core points, clusters from the pairs kept).

    Attributes:
        labels_: cluster per row, ``-1`` for noise.
        core_sample_indices_: indices of core points.
        eps_: the radius used.
        eps_curve_: (eps, share clustered outside the largest cluster) for every radius tried.
        n_clusters_: number of clusters.
        n_pairs_: number of neighbour pairs within ``eps`` kept to label from (self excluded).
        n_capped_rows_: rows some of whose pairs were not kept (0 unless the pairs within ``eps``
            would not fit in memory; their core status is still exact, see ``capped_pass``).
    """

    def __init__(
        self,
        eps: float | None = None,
        min_samples: int = 5,
        block: int | None = None,
        random_state: int = 0,
        budget_bytes: int = 128 << 20,
        precision: str = "auto",
        max_pairs: int = SWEEP_MAX_PAIRS,
    ):
        self.eps = eps
        self.min_samples = min_samples
        self.block = block
        self.random_state = random_state
        self.budget_bytes = budget_bytes
        self.precision = precision
        self.max_pairs = max_pairs

    def fit(self, X: np.ndarray, y: None = None) -> SparseDBSCAN:
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[0] == 0:
            raise ValueError("X must be a non-empty 2-D array of embeddings")
        if self.min_samples < 1:
            raise ValueError("min_samples must be at least 1")
        X = normalise(X)
        if self.eps is None:
            nb = sweep(X, self.min_samples, 2000, self.random_state, self.block, self.budget_bytes, self.precision, self.max_pairs)
        else:
            nb = pairs_at(
                X, float(self.eps), self.min_samples, 2000, self.random_state, self.block, self.budget_bytes, self.precision, self.max_pairs
            )
        self.eps_, self.eps_curve_, self.n_capped_rows_ = nb.eps, nb.curve, nb.capped_rows
        self.n_pairs_ = int(nb.i.size)
        self.labels_, core = dbscan_from_pairs(X.shape[0], nb.i, nb.j, self.min_samples, degree=nb.degree)
        if nb.degree is not None:
            complete_borders(X, self.labels_, core, nb.reach if nb.reach is not None else nb.degree, nb.i, nb.j, nb.eps)
        self.core_sample_indices_ = np.flatnonzero(core)
        self.n_clusters_ = int(self.labels_.max() + 1) if self.labels_.size else 0
        return self
