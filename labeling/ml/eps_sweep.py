"""The eps sweep: the DBSCAN radius that finds fine, pure topics, and the pairs to label at it.

``sweep`` (``SparseDBSCAN(eps=None)``) tries radii between quantiles of the core distance on the
full data, from one pass over the pairs within the largest of them, and keeps the one that clusters
the most points outside the largest cluster: fine, pure topics, just before they start to merge.
Dense data whose pairs would not fit in memory is swept with a capped pass (``labeling.ml.radius.capped_pass``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .pair_labels import NOISE, dbscan_from_pairs
from .radius import BF16_SLACK, candidate_pairs, capped_pass, exact_within, knn_cosine_distances, normalise, radius_pairs, use_bf16


def eps_grid(core_dist: np.ndarray, top: float = 0.8, steps: int = 20) -> np.ndarray:
    """Candidate radii: quantiles of the core distances, from 2% to ``top``.

    At the radius of quantile q about a share q of the points are core points, so the grid spans
    "a few dense cores" to "``top`` of the points are core", whatever the scale of the data.
    """
    grid = np.quantile(core_dist, np.linspace(0.02, top, steps))
    return np.unique(np.maximum(grid, 1e-4).astype(np.float64))


# The sweep keeps every pair up to the grid's largest radius: about 30 bytes a pair at the peak
# (indices, distances, the sort order and the sorted copies), so 16M pairs stay under ~0.5 GB.
SWEEP_MAX_PAIRS = 16_000_000
SWEEP_TOPS = (0.98, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)
SWEEP_WORK = 4


def _sample_neighbours(x: np.ndarray, min_samples: int, sample: int, seed: int, max_pairs: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(sorted distances from sampled rows to their nearest M rows, their core distances, M).

    M is chosen so that M neighbours per row on average would be twice ``SWEEP_WORK * max_pairs``:
    an estimate that saturates at M is "too many" whatever the true count.
    """
    n = x.shape[0]
    m = int(min(n - 1, max(min_samples, int(np.ceil(4 * SWEEP_WORK * max_pairs / max(n, 1))))))
    rows = np.random.default_rng(seed).choice(n, sample, replace=False) if n > sample else None
    nearest = knn_cosine_distances(x, m, rows=rows)
    return nearest, nearest[:, max(1, min_samples - 1) - 1], m


@dataclass
class SweepPlan:
    """The radii ``sweep`` tries: a first grid whose pairs all fit in memory (collected in
    ``mode``, "bfloat16" or "float32"), and a wider one for a capped second pass if needed."""

    grid: np.ndarray
    mode: str
    wide_grid: np.ndarray


def sweep_grid(
    x: np.ndarray, min_samples: int = 5, sample: int = 2000, seed: int = 0, max_pairs: int = SWEEP_MAX_PAIRS, precision: str = "auto"
) -> SweepPlan:
    """Plan the radii ``sweep`` tries (each grid is ``eps_grid`` up to some share of core points).

    The first grid goes up to the highest share (98% down to 20%) whose pairs fit in ``max_pairs``
    (bfloat16 products where fast, keeping ``BF16_SLACK`` beyond the radius); the wide grid up to the
    highest share with at most ``SWEEP_WORK * max_pairs`` pairs, swept with a capped pass only when the
    first grid ends before its best radius. A sample of rows against all rows gives the core distances
    and an estimate of the pairs within each radius (an underestimate, which ``candidate_pairs`` corrects).
    """
    x = normalise(x)
    n = x.shape[0]
    nearest, core_dist, _ = _sample_neighbours(x, min_samples, sample, seed, max_pairs)

    def pairs_within(radius: float) -> float:
        return n / 2.0 * float((nearest <= radius).sum(axis=1).mean())

    def radius(top: float) -> float:
        return float(np.quantile(core_dist, top))

    wide_top = next((t for t in SWEEP_TOPS if pairs_within(radius(t)) <= SWEEP_WORK * max_pairs), SWEEP_TOPS[-1])
    bf16 = precision == "bfloat16" or (precision == "auto" and use_bf16("auto", 0.0))
    margin = BF16_SLACK if bf16 else 0.0
    top = next((t for t in SWEEP_TOPS if t <= wide_top and pairs_within(radius(t) + margin) <= max_pairs), SWEEP_TOPS[-1])
    grid = eps_grid(core_dist, top=top)
    if precision == "auto" and grid[-1] - grid[0] < 4 * BF16_SLACK:
        bf16 = False  # the radii lie closer together than bfloat16 tells apart
    return SweepPlan(grid, "bfloat16" if bf16 else "float32", eps_grid(core_dist, top=wide_top))


def clustered_outside_largest(labels: np.ndarray) -> float:
    """Share of points in a cluster other than the largest one: high for many good topics, low for
    mostly noise (radius too small) and for one giant merged cluster (radius past percolation)."""
    clustered = labels[labels != NOISE]
    if clustered.size == 0:
        return 0.0
    return float((clustered.size - np.bincount(clustered).max()) / labels.size)


def select_eps(
    n: int, i: np.ndarray, j: np.ndarray, d: np.ndarray, grid: np.ndarray, min_samples: int, counts: np.ndarray | None = None
) -> tuple[float, np.ndarray, list[tuple[float, float]]]:
    """The radius of ``grid`` whose DBSCAN clusters most points outside the largest cluster.

    ``i, j, d`` are the neighbour pairs within ``max(grid)`` (or, with ``counts``, the pairs kept by
    a capped pass, ``counts[:, g]`` being each row's true number of neighbours within ``grid[g]``);
    returns (eps, labels at eps, the (eps, score) curve). Too small a radius leaves most points as
    noise, too large a radius merges topics into one giant component: the criterion peaks between,
    at fine and pure topics.
    """
    order = np.argsort(d, kind="stable")
    i, j, d = i[order], j[order], d[order]
    best: tuple[float, float, np.ndarray | None] = (-1.0, float(grid[0]), None)
    curve = []
    for g, eps in enumerate(grid):
        k = int(np.searchsorted(d, eps, side="right"))
        degree = None if counts is None else counts[:, g] + 1
        labels, _ = dbscan_from_pairs(n, i[:k], j[:k], min_samples, degree=degree)
        score = clustered_outside_largest(labels)
        curve.append((float(eps), score))
        if score > best[0]:
            best = (score, float(eps), labels)
    assert best[2] is not None
    return best[1], best[2], curve


@dataclass
class Neighbours:
    """The pairs a fit labels from: all pairs within ``eps`` (i < j, float32 distances), or with
    ``degree`` set, a capped subset and every row's exact neighbour count (self included)."""

    eps: float
    i: np.ndarray
    j: np.ndarray
    d: np.ndarray
    degree: np.ndarray | None = None
    curve: list[tuple[float, float]] = field(default_factory=list)
    capped_rows: int = 0
    reach: np.ndarray | None = None  # with degree: an upper bound of each row's neighbour count


def _cap(n: int, min_samples: int, max_pairs: int) -> int:
    """Pairs kept per row by a capped pass: enough to keep dense regions connected (the nearest
    8 * min_samples later rows), and never more than the memory budget allows."""
    return max(min_samples, min(8 * min_samples, max_pairs // max(n, 1)))


def sweep(
    x: np.ndarray, min_samples: int, sample: int, seed: int, block: int | None = None, budget_bytes: int = 128 << 20,
    precision: str = "auto", max_pairs: int = SWEEP_MAX_PAIRS,
) -> Neighbours:
    """The radius that clusters the most points outside the largest cluster (``select_eps``), and the pairs to label from."""
    n = x.shape[0]
    if n <= min_samples:
        return Neighbours(0.3, *radius_pairs(x, 0.3, block=block, budget_bytes=budget_bytes, precision=precision))
    plan = sweep_grid(x, min_samples, sample=sample, seed=seed, max_pairs=max_pairs, precision=precision)
    if plan.mode == "float32" and plan.wide_grid[-1] > plan.grid[-1]:
        # A full float32 pass costs about what a capped pass over the wide grid does: run that one.
        return _capped_sweep(x, plan.wide_grid, min_samples, block, budget_bytes, max_pairs, precision)
    grid = plan.grid
    # Candidate pairs with approximate distances (exact under float32) are enough to choose eps.
    found = candidate_pairs(x, float(grid[-1]), block, budget_bytes, plan.mode, max_pairs=max_pairs)
    if found is None:  # more pairs than estimated: bound the memory with a capped pass
        return _capped_sweep(x, plan.wide_grid, min_samples, block, budget_bytes, max_pairs, precision)
    i, j, d, slack = found
    eps, _, curve = select_eps(n, i, j, d, grid, min_samples)
    if eps < grid[-1] or plan.wide_grid[-1] <= grid[-1]:
        return Neighbours(eps, *exact_within(x, i, j, d, slack, eps), curve=curve)
    # Still rising at the last radius that fits: sweep the wide grid with a capped pass.
    del i, j, d
    return _capped_sweep(x, plan.wide_grid, min_samples, block, budget_bytes, max_pairs, precision)


def _capped_sweep(
    x: np.ndarray, grid: np.ndarray, min_samples: int, block: int | None, budget_bytes: int, max_pairs: int, precision: str
) -> Neighbours:
    n = x.shape[0]
    bf16 = use_bf16(precision, float(grid[-1]))
    i, j, d, counts, slack = capped_pass(x, grid, _cap(n, min_samples, max_pairs), block, budget_bytes, bf16)
    eps, _, curve = select_eps(n, i, j, d, grid, min_samples, counts=counts[1])
    nb = _settle_capped(x, i, j, d, counts, slack, grid, int(np.searchsorted(grid, eps)), min_samples)
    nb.curve = curve
    return nb


def pairs_at(
    x: np.ndarray, eps: float, min_samples: int, sample: int, seed: int, block: int | None, budget_bytes: int, precision: str,
    max_pairs: int = SWEEP_MAX_PAIRS,
) -> Neighbours:
    """The pairs for a given radius: all of them, or capped where they would not fit ``max_pairs``."""
    n = x.shape[0]
    nearest, _, _ = _sample_neighbours(x, min_samples, sample, seed, max_pairs)
    if n / 2.0 * float((nearest <= eps).sum(axis=1).mean()) <= max_pairs:
        return Neighbours(eps, *radius_pairs(x, eps, block=block, budget_bytes=budget_bytes, precision=precision))
    grid = np.array([eps])
    i, j, d, counts, slack = capped_pass(x, grid, _cap(n, min_samples, max_pairs), block, budget_bytes, use_bf16(precision, eps))
    return _settle_capped(x, i, j, d, counts, slack, grid, 0, min_samples)


def _settle_capped(
    x: np.ndarray, i: np.ndarray, j: np.ndarray, d: np.ndarray, counts: np.ndarray, slack: float, grid: np.ndarray, g: int, min_samples: int
) -> Neighbours:
    """Exact DBSCAN inputs at ``grid[g]`` from a capped pass: kept pairs truly within it, every row's
    core status exact (rows the bounds leave in doubt are recounted in float32)."""
    n = x.shape[0]
    eps = float(grid[g])
    sure, reach = counts[0][:, g] + 1, counts[2][:, g] + 1
    degree = sure.astype(np.int64)
    doubtful = np.flatnonzero((reach >= min_samples) & (sure < min_samples))
    for start in range(0, doubtful.size, 256):
        rows = doubtful[start : start + 256]
        degree[rows] = ((x[rows] @ x.T) >= np.float32(1.0 - eps)).sum(axis=1)
    i, j, d = exact_within(x, i, j, d, slack, eps, all_exact=False)
    capped_rows = int((reach - 1 > np.bincount(i, minlength=n) + np.bincount(j, minlength=n)).sum())
    return Neighbours(eps, i, j, d, degree, capped_rows=capped_rows, reach=reach)

