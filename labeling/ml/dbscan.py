"""DBSCAN over query embeddings: the radius search, the eps sweep and the ``SparseDBSCAN`` estimator.

Long because the estimator, the eps sweep and the radius search share private pair-finding helpers the sweep drives step by step.

``SparseDBSCAN`` is DBSCAN over L2-normalised embeddings with cosine distance, with exactly sklearn's
labels, computed from the list of close pairs instead of neighbourhood lists: the pairs are found
block by block (one matrix product per block of rows, upper triangle only, fixed-size buffers;
bfloat16 products on CPUs with fast bfloat16 units, the pairs near the radius then recomputed in
float32), and clusters are read from them directly (core points, connected components, border
points). Memory grows with the number of close pairs; where those would not fit, a capped pass keeps
each row's nearest pairs and exact neighbour counts (``capped_pairs``).

``suggest_eps`` sweeps radii between quantiles of the core distance on the full data, from the same
single pass over the pairs, and keeps the one that clusters the most points outside the largest
cluster: fine, pure topics, just before they start to merge.

Grouping the topics found here into expert proposals, and naming them, is ``labeling.ml.grouping``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.decomposition import PCA

NOISE = -1


def normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, as float32 (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


def knn_cosine_distances(x: np.ndarray, k: int, block: int = 2048, rows: np.ndarray | None = None) -> np.ndarray:
    """Cosine distance from each row (or each of ``rows``) to its k nearest *other* rows of ``x``, ascending.

    Returns shape (len(rows) or n, k). Neighbours are always searched among all rows of ``x``, so a
    sample of ``rows`` sees the full data's density.
    """
    x = normalise(x)
    n = x.shape[0]
    k = max(1, min(k, n - 1))
    query = np.arange(n) if rows is None else np.asarray(rows, dtype=int)
    out = np.empty((query.size, k), dtype=np.float32)
    block = max(1, min(block, (64 << 20) // (4 * max(n, 1))))
    for start in range(0, query.size, block):
        q = query[start : start + block]
        sims = x[q] @ x.T
        sims[np.arange(q.size), q] = -np.inf  # exclude self
        np.negative(sims, out=sims)
        top = np.partition(sims, k - 1, axis=1)[:, :k]  # the k largest similarities, negated
        out[start : start + q.size] = np.sort(1.0 + top, axis=1)
    return out


def core_distances(x: np.ndarray, min_samples: int = 5, sample: int = 2000, seed: int = 0) -> np.ndarray:
    """Distance to the ``min_samples - 1``-th other neighbour (a point is core within it), for a sample
    of rows measured against all rows, so the sample sees the full data's density."""
    x = normalise(x)
    n = x.shape[0]
    rows = np.random.default_rng(seed).choice(n, sample, replace=False) if n > sample else None
    return knn_cosine_distances(x, max(1, min_samples - 1), rows=rows)[:, -1]


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
    """The radii ``suggest_eps`` tries: a first grid whose pairs all fit in memory (collected in
    ``mode``, "bfloat16" or "float32"), and a wider one for a capped second pass if needed."""

    grid: np.ndarray
    mode: str
    wide_grid: np.ndarray


def sweep_grid(
    x: np.ndarray, min_samples: int = 5, sample: int = 2000, seed: int = 0, max_pairs: int = SWEEP_MAX_PAIRS, precision: str = "auto"
) -> SweepPlan:
    """Plan the radii ``suggest_eps`` tries (each grid is ``eps_grid`` up to some share of core points).

    The first grid goes up to the highest share (98% down to 20%) whose radius keeps the pairs within
    ``max_pairs``, so they can all be kept: found with bfloat16 products where those are fast (they
    must also collect the pairs up to ``BF16_SLACK`` beyond the radius, and cannot tell radii closer
    than that apart) or else float32. The wide grid goes up to the highest share whose radius has at
    most ``SWEEP_WORK * max_pairs`` pairs: a radius with more would cost more to scan than it can
    tell (the outliers' radii, far past the point where topics merge). It is swept only when the
    first grid ends before its best radius (dense data: near-duplicates, tight topics), with a
    "capped" pass (``capped_pairs``: exact neighbour counts, each row's nearest pairs only).

    A sample of rows is measured against all rows; the distances to each sampled row's nearest M
    neighbours give both its core distance and an estimate of how many pairs lie within a radius
    (rows with all M within it count as M: an underestimate, which ``_candidate_pairs`` corrects).
    """
    x = normalise(x)
    n = x.shape[0]
    nearest, core_dist, _ = _sample_neighbours(x, min_samples, sample, seed, max_pairs)

    def pairs_within(radius: float) -> float:
        return n / 2.0 * float((nearest <= radius).sum(axis=1).mean())

    def radius(top: float) -> float:
        return float(np.quantile(core_dist, top))

    wide_top = next((t for t in SWEEP_TOPS if pairs_within(radius(t)) <= SWEEP_WORK * max_pairs), SWEEP_TOPS[-1])
    bf16 = precision == "bfloat16" or (precision == "auto" and _use_bf16("auto", 0.0))
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


def suggest_eps(x: np.ndarray, min_samples: int = 5, sample: int = 2000, seed: int = 0) -> float:
    """Suggest DBSCAN's ``eps`` (cosine distance) for fine, pure topics.

    Sweeps ``sweep_grid`` on the full data (one pass over the pairs within the grid's largest radius,
    then DBSCAN at every radius from those pairs) and keeps the radius where the most points are in
    clusters other than the largest (``select_eps``). ``SparseDBSCAN(eps=None)`` does the same and
    reuses the pairs.
    """
    return _suggest(normalise(np.asarray(x)), min_samples, sample, seed).eps


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


def _suggest(
    x: np.ndarray, min_samples: int, sample: int, seed: int, block: int | None = None, budget_bytes: int = 128 << 20,
    precision: str = "auto", max_pairs: int = SWEEP_MAX_PAIRS,
) -> Neighbours:
    """The sweep of ``suggest_eps``: the chosen radius and the pairs to label from."""
    n = x.shape[0]
    if n <= min_samples:
        return Neighbours(0.3, *radius_pairs(x, 0.3, block=block, budget_bytes=budget_bytes, precision=precision))
    plan = sweep_grid(x, min_samples, sample=sample, seed=seed, max_pairs=max_pairs, precision=precision)
    if plan.mode == "float32" and plan.wide_grid[-1] > plan.grid[-1]:
        # A full float32 pass costs about what a capped pass over the wide grid does: run that one.
        return _capped_sweep(x, plan.wide_grid, min_samples, block, budget_bytes, max_pairs, precision)
    grid = plan.grid
    # Candidate pairs with approximate distances (exact under float32) are enough to choose eps.
    found = _candidate_pairs(x, float(grid[-1]), block, budget_bytes, plan.mode, max_pairs=max_pairs)
    if found is None:  # more pairs than estimated: bound the memory with a capped pass
        return _capped_sweep(x, plan.wide_grid, min_samples, block, budget_bytes, max_pairs, precision)
    i, j, d, slack = found
    eps, _, curve = select_eps(n, i, j, d, grid, min_samples)
    if eps < grid[-1] or plan.wide_grid[-1] <= grid[-1]:
        return Neighbours(eps, *_exact_within(x, i, j, d, slack, eps), curve=curve)
    # Still rising at the last radius that fits: sweep the wide grid with a capped pass.
    del i, j, d
    return _capped_sweep(x, plan.wide_grid, min_samples, block, budget_bytes, max_pairs, precision)


def _capped_sweep(
    x: np.ndarray, grid: np.ndarray, min_samples: int, block: int | None, budget_bytes: int, max_pairs: int, precision: str
) -> Neighbours:
    n = x.shape[0]
    bf16 = _use_bf16(precision, float(grid[-1]))
    i, j, d, counts, slack = _capped_pass(x, grid, _cap(n, min_samples, max_pairs), block, budget_bytes, bf16)
    eps, _, curve = select_eps(n, i, j, d, grid, min_samples, counts=counts[1])
    nb = _settle_capped(x, i, j, d, counts, slack, grid, int(np.searchsorted(grid, eps)), min_samples)
    nb.curve = curve
    return nb


def _at_radius(
    x: np.ndarray, eps: float, min_samples: int, sample: int, seed: int, block: int | None, budget_bytes: int, precision: str,
    max_pairs: int = SWEEP_MAX_PAIRS,
) -> Neighbours:
    """The pairs for a given radius: all of them, or capped where they would not fit ``max_pairs``."""
    n = x.shape[0]
    nearest, _, _ = _sample_neighbours(x, min_samples, sample, seed, max_pairs)
    if n / 2.0 * float((nearest <= eps).sum(axis=1).mean()) <= max_pairs:
        return Neighbours(eps, *radius_pairs(x, eps, block=block, budget_bytes=budget_bytes, precision=precision))
    grid = np.array([eps])
    i, j, d, counts, slack = _capped_pass(x, grid, _cap(n, min_samples, max_pairs), block, budget_bytes, _use_bf16(precision, eps))
    return _settle_capped(x, i, j, d, counts, slack, grid, 0, min_samples)


def _block_rows(n: int, block: int | None, budget_bytes: int, bytes_per_entry: int) -> int:
    """Rows per similarity block: ``block`` if given, else as many as fit ``budget_bytes``."""
    if block:
        return max(1, int(block))
    return max(16, min(n, budget_bytes // (bytes_per_entry * max(n, 1))))


# A bfloat16 dot product of two unit vectors, accumulated in float32 and rounded to bfloat16, is off
# by at most about 2.5 * 2**-8 (2**-8 per rounded input vector, 2**-9 for rounding the result below
# 1); 2**-6 leaves margin. Measured on MiniLM embeddings: at most 0.003.
BF16_SLACK = 2.0**-6


@lru_cache(maxsize=1)
def _bf16_is_faster() -> bool:
    """Whether torch multiplies bfloat16 matrices at least twice as fast as numpy float32 here.

    True on CPUs with AMX or AVX512-BF16 units (several times faster), false where bfloat16 is
    emulated or torch is missing. Decided once per process by timing one small product each way.
    """
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a project dependency
        return False
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 384), dtype=np.float32)
    b = rng.standard_normal((8192, 384), dtype=np.float32)
    ta, tb = torch.from_numpy(a).to(torch.bfloat16), torch.from_numpy(b).to(torch.bfloat16)

    def best(fn: Callable[[], object]) -> float:
        fn()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    return best(lambda: torch.matmul(ta, tb.T)) * 2 < best(lambda: a @ b.T)


def _use_bf16(precision: str, eps: float) -> bool:
    if precision not in {"auto", "float32", "bfloat16"}:
        raise ValueError(f"precision must be 'auto', 'float32' or 'bfloat16', not {precision!r}")
    # The integer comparison of bfloat16 bit patterns below needs a positive similarity threshold.
    if precision == "float32" or 1.0 - eps - BF16_SLACK <= 0.0:
        return False
    return precision == "bfloat16" or _bf16_is_faster()


def _candidate_pairs(
    x: np.ndarray, eps: float, block: int | None, budget_bytes: int, precision: str, max_pairs: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
    """Pairs ``i < j`` that may be within ``eps``: (i, j, approximate distance, its error bound).

    With float32 products the list is exact and the bound 0. With bfloat16 products (several times
    faster on CPUs with AMX) every pair within ``eps`` is included, plus pairs up to ``eps + 2 slack``,
    and the distances are off by at most ``slack``; ``_exact_within`` settles the doubtful ones.

    With ``max_pairs``, a pass that finds more pairs than that stops and returns ``None`` (the
    estimate that chose ``eps`` was wrong): memory stays bounded, and the caller turns to a capped
    pass.
    """
    n = x.shape[0]
    bf16 = _use_bf16(precision, eps)
    slack = BF16_SLACK if bf16 else 0.0
    if bf16:
        import torch

        xb = torch.from_numpy(x).to(torch.bfloat16)
        b = _block_rows(n, block, budget_bytes, 3)  # 2 bytes per similarity + 1 per mask entry
        sims_t = torch.empty(b * n, dtype=torch.bfloat16)
        values = sims_t.view(torch.int16).numpy()
    else:
        b = _block_rows(n, block, budget_bytes, 5)  # 4 bytes per similarity + 1 per mask entry
        values = np.empty(b * n, dtype=np.float32)
    mask_buf = np.empty(b * n, dtype=bool)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    kept = 0
    for start in range(0, n, b):
        stop = min(n, start + b)
        rows, cols = stop - start, n - start
        if bf16:
            torch.matmul(xb[start:stop], xb[start:].T, out=sims_t[: rows * cols].view(rows, cols))
            threshold = _bf16_bits_at_most(1.0 - eps - slack)
        else:
            np.matmul(x[start:stop], x[start:].T, out=values[: rows * cols].reshape(rows, cols))
            threshold = np.float32(1.0 - eps)
        mask = mask_buf[: rows * cols]
        np.greater_equal(values[: rows * cols], threshold, out=mask)
        parts.append(_upper_pairs(np.flatnonzero(mask), cols, start, values[: rows * cols], bf16=bf16))
        kept += parts[-1][0].size
        if max_pairs is not None and kept > max_pairs:
            return None
    return (*_concat(parts), slack)


def _bf16_bits_at_most(value: float) -> np.int16:
    """The int16 bit pattern of the largest bfloat16 not above ``value`` (> 0).

    For non-negative floats the order of bfloat16 values is the order of their bit patterns read as
    int16, and negative values read as negative int16: one integer comparison does.
    """
    import torch

    t = torch.tensor([value], dtype=torch.float32).to(torch.bfloat16)
    bits = int(t.view(torch.int16))
    if float(t) > value:  # rounded up: step one bfloat16 down so nothing is missed
        bits -= 1
    return np.int16(bits)


def _upper_pairs(flat: np.ndarray, cols: int, start: int, values: np.ndarray, bf16: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Block-local flat indices to global (i, j, distance) with i < j (the diagonal dropped)."""
    r = flat // cols
    c = flat % cols
    upper = c > r  # column offset == row offset is the diagonal (self)
    flat, r, c = flat[upper], r[upper], c[upper]
    if bf16:  # bfloat16 is the top half of a float32
        sims = (values[flat].astype(np.int32) << 16).view(np.float32)
    else:
        sims = values[flat]
    d = np.maximum(np.float32(1.0) - sims, np.float32(0.0))
    return (r + start).astype(np.int32), (c + start).astype(np.int32), d.astype(np.float32)


def _concat(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not parts:
        empty = np.zeros(0, dtype=np.int32)
        return empty, empty, np.zeros(0, dtype=np.float32)
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))  # type: ignore[return-value]


def _exact_within(
    x: np.ndarray, i: np.ndarray, j: np.ndarray, d: np.ndarray, slack: float, eps: float, chunk: int = 1 << 16, all_exact: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The candidates truly within ``eps``, with float32 distances.

    Only the doubtful band within ``slack`` of ``eps`` decides membership and is recomputed, one
    float32 dot product per pair; with ``all_exact`` the pairs surely inside get their float32
    distance too (so that smaller radii can be read from them exactly), else keep the approximate one.
    """
    if slack <= 0.0:
        keep = d <= np.float32(eps)
        return i[keep], j[keep], d[keep]
    sure = d <= np.float32(eps - slack)
    doubtful = np.flatnonzero((~sure | all_exact) & (d <= np.float32(eps + slack)))
    d = d.copy()
    for start in range(0, doubtful.size, chunk):
        idx = doubtful[start : start + chunk]
        sims = np.einsum("ij,ij->i", x[i[idx]], x[j[idx]])
        d[idx] = np.maximum(np.float32(1.0) - sims, np.float32(0.0))
    keep = sure.copy()
    keep[doubtful] = d[doubtful] <= np.float32(eps)
    return i[keep], j[keep], d[keep]


def radius_pairs(
    x: np.ndarray, eps: float, block: int | None = None, budget_bytes: int = 128 << 20, precision: str = "auto"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs ``i < j`` of rows within cosine distance ``eps``: (i, j, distance), int32/int32/float32.

    Only the upper triangle is computed (each block of rows against the rows from its first one on),
    which halves the work, and the similarity and mask buffers are allocated once, so the working
    memory stays at about ``budget_bytes`` whatever ``n``; the result grows with the number of close
    pairs only. Rows must already be L2-normalised float32.

    ``precision="auto"`` multiplies in bfloat16 where that is at least twice as fast (CPUs with
    AMX or AVX512-BF16) and recomputes the pairs near the boundary in float32, so the pairs returned
    are the float32 ones either way; ``"float32"`` or ``"bfloat16"`` force one path.
    """
    found = _candidate_pairs(x, eps, block, budget_bytes, precision)
    assert found is not None  # no max_pairs: never stops early
    return _exact_within(x, *found, eps)


def dbscan_from_pairs(
    n: int, i: np.ndarray, j: np.ndarray, min_samples: int, degree: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """DBSCAN labels from the list of neighbour pairs ``i < j`` (self-pairs implied); returns (labels, core mask).

    Gives exactly sklearn's ``DBSCAN`` labels: a point is core when it has at least ``min_samples``
    neighbours counting itself; clusters are the connected components of core points, numbered in the
    order of their lowest-index core point; a border point joins the lowest-numbered cluster among
    its core neighbours (the cluster sklearn's depth-first expansion reaches it from first).

    ``degree`` (neighbours counting itself) overrides the count from the pairs, for pair lists that
    keep only some of each row's neighbours (``capped_pairs``): core points stay exact, clusters
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


def capped_pairs(
    x: np.ndarray, grid: np.ndarray, cap: int, block: int | None = None, budget_bytes: int = 128 << 20
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Float32 pairs within ``max(grid)``, keeping for each row only its ``cap`` nearest later rows,
    with every row's exact neighbour count within each radius of ``grid``: (i, j, d, counts).

    ``counts[r, g]`` counts all of row r's neighbours within ``grid[g]`` (self excluded), dropped
    pairs included, so core points are exactly DBSCAN's; memory is ``n * cap`` pairs at most, however
    dense the data. Rows with more than ``cap`` later neighbours keep the nearest ones, which in
    dense regions still connect what DBSCAN connects (``SparseDBSCAN`` reports ``n_capped_rows_``).
    """
    i, j, d, counts, _ = _capped_pass(x, np.asarray(grid, dtype=np.float64), cap, block, budget_bytes, bf16=False)
    return i, j, d, counts[1]


def _capped_pass(
    x: np.ndarray, grid: np.ndarray, cap: int, block: int | None, budget_bytes: int, bf16: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """``capped_pairs`` in float32 or bfloat16: (i, j, d, counts, slack).

    ``counts[k, r, g]`` counts row r's pairs with distance within ``grid[g] + (k - 1) * slack``: with
    bfloat16 distances (off by at most ``slack``) ``counts[0]`` is a lower and ``counts[2]`` an upper
    bound of the true count within ``grid[g]``, ``counts[1]`` an estimate; with float32 all three
    are the exact count.
    """
    n = x.shape[0]
    slack = BF16_SLACK if bf16 else 0.0
    edges = np.concatenate([grid - slack, grid, grid + slack]).astype(np.float32)
    order_edges = np.argsort(edges, kind="stable")
    sorted_edges = edges[order_edges]
    n_edges = edges.size
    if bf16:
        import torch

        xb = torch.from_numpy(x).to(torch.bfloat16)
        b = _block_rows(n, block, budget_bytes, 3)
        sims_t = torch.empty(b * n, dtype=torch.bfloat16)
        values = sims_t.view(torch.int16).numpy()
        threshold = _bf16_bits_at_most(1.0 - float(grid[-1]) - slack)
    else:
        b = _block_rows(n, block, budget_bytes, 5)
        values = np.empty(b * n, dtype=np.float32)
        threshold = np.float32(1.0) - np.float32(grid[-1])
    mask_buf = np.empty(b * n, dtype=bool)
    hist = np.zeros(n * n_edges, dtype=np.int32)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for start in range(0, n, b):
        stop = min(n, start + b)
        rows, cols = stop - start, n - start
        if bf16:
            torch.matmul(xb[start:stop], xb[start:].T, out=sims_t[: rows * cols].view(rows, cols))
        else:
            np.matmul(x[start:stop], x[start:].T, out=values[: rows * cols].reshape(rows, cols))
        mask = mask_buf[: rows * cols]
        np.greater_equal(values[: rows * cols], threshold, out=mask)
        r, c, d = _upper_pairs(np.flatnonzero(mask), cols, start, values[: rows * cols], bf16=bf16)
        first = np.searchsorted(sorted_edges, d, side="left")  # the smallest edge each pair is within
        inside = first < n_edges
        # Both ends of a pair lie in rows start.. n: count them there (bincount beats add.at).
        for end in (r, c):
            local = (end[inside] - start).astype(np.int64) * n_edges + first[inside]
            hist[start * n_edges :] += np.bincount(local, minlength=cols * n_edges).astype(np.int32)
        per_row = np.bincount(r - start, minlength=rows)
        if per_row.max(initial=0) > cap:
            order = np.lexsort((d, r))  # by row, nearest first
            r, c, d = r[order], c[order], d[order]
            rank = np.arange(r.size) - np.repeat(np.cumsum(per_row) - per_row, per_row)
            keep = rank < cap
            r, c, d = r[keep], c[keep], d[keep]
        parts.append((r, c, d))
    i, j, d = _concat(parts)
    cumulative = np.cumsum(hist.reshape(n, n_edges), axis=1)
    counts = np.empty((n, n_edges), dtype=np.int32)
    counts[:, order_edges] = cumulative
    return i, j, d, counts.reshape(n, 3, grid.size).transpose(1, 0, 2), slack


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
    i, j, d = _exact_within(x, i, j, d, slack, eps, all_exact=False)
    capped_rows = int((reach - 1 > np.bincount(i, minlength=n) + np.bincount(j, minlength=n)).sum())
    return Neighbours(eps, i, j, d, degree, capped_rows=capped_rows, reach=reach)


def _complete_borders(x: np.ndarray, labels: np.ndarray, core: np.ndarray, reach: np.ndarray, i: np.ndarray, j: np.ndarray, eps: float) -> None:
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


def radius_graph(x: np.ndarray, eps: float, block: int | None = None) -> sparse.csr_matrix:
    """Sparse symmetric matrix of cosine distances for all pairs within ``eps`` (self-pairs included).

    Stored distances are clipped to at least 1e-9 so that exact duplicates (and the diagonal) stay
    explicit entries: sklearn's ``metric="precomputed"`` treats missing entries as "not a neighbour".
    """
    x = normalise(x)
    n = x.shape[0]
    i, j, d = radius_pairs(x, eps, block=block)
    d = np.maximum(d, np.float32(1e-9))
    diag = np.arange(n, dtype=np.int32)
    rows = np.concatenate([i, j, diag])
    cols = np.concatenate([j, i, diag])
    vals = np.concatenate([d, d, np.full(n, 1e-9, dtype=np.float32)])
    return sparse.csr_matrix((vals, (rows, cols)), shape=(n, n), dtype=np.float32)


class SparseDBSCAN(ClusterMixin, BaseEstimator):
    """DBSCAN with cosine distance on a sparse radius-neighbour graph; the same labels as sklearn's.

    The neighbour pairs within ``eps`` are found block by block (``radius_pairs``: one matrix product
    per block of rows, upper triangle only, fixed-size buffers, bfloat16 where the CPU has fast
    bfloat16 units with the boundary pairs recomputed in float32), and the clusters are read from them
    directly (``dbscan_from_pairs``: core points, connected components, border points), so no
    neighbourhood lists are ever materialised. Memory is ``budget_bytes`` plus about 12 bytes per
    close pair; time is dominated by the n² / 2 dot products. With ``eps=None`` the radius is chosen
    by ``suggest_eps`` from the same single pass over the pairs.

    Args:
        eps: neighbourhood radius in cosine distance; ``None`` picks ``suggest_eps``.
        min_samples: points within ``eps`` (self included) for a core point.
        n_components: reduce to this many PCA dimensions first (``None`` keeps all). Faster, but the
            labels are then those of DBSCAN on the projected vectors, not on the originals.
        block: rows per similarity block; ``None`` sizes blocks to ``budget_bytes``.
        random_state: seed for the eps sample and PCA.
        budget_bytes: working memory for one block of similarities when ``block`` is ``None``.
        precision: ``"auto"``, ``"float32"`` or ``"bfloat16"`` products (see ``radius_pairs``); the
            labels are those of float32 distances in every case.
        max_pairs: most neighbour pairs to hold; past it each row keeps only its nearest pairs
            (``capped_pairs``: exact core points, clusters from the pairs kept).

    Attributes:
        labels_: cluster per row, ``-1`` for noise.
        core_sample_indices_: indices of core points.
        eps_: the radius used.
        eps_curve_: (eps, share clustered outside the largest cluster) for every radius tried.
        n_clusters_: number of clusters.
        n_pairs_: number of neighbour pairs within ``eps`` kept to label from (self excluded).
        n_capped_rows_: rows some of whose pairs were not kept (0 unless the pairs within ``eps``
            would not fit in memory; their core status is still exact, see ``capped_pairs``).
    """

    def __init__(
        self,
        eps: float | None = None,
        min_samples: int = 5,
        n_components: int | None = None,
        block: int | None = None,
        random_state: int = 0,
        budget_bytes: int = 128 << 20,
        precision: str = "auto",
        max_pairs: int = SWEEP_MAX_PAIRS,
    ):
        self.eps = eps
        self.min_samples = min_samples
        self.n_components = n_components
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
        if self.n_components and self.n_components < X.shape[1] and X.shape[0] > self.n_components:
            X = normalise(PCA(n_components=self.n_components, random_state=self.random_state).fit_transform(X))
        if self.eps is None:
            nb = _suggest(X, self.min_samples, 2000, self.random_state, self.block, self.budget_bytes, self.precision, self.max_pairs)
        else:
            nb = _at_radius(
                X, float(self.eps), self.min_samples, 2000, self.random_state, self.block, self.budget_bytes, self.precision, self.max_pairs
            )
        self.eps_, self.eps_curve_, self.n_capped_rows_ = nb.eps, nb.curve, nb.capped_rows
        self.n_pairs_ = int(nb.i.size)
        # Kept for labels_at (smaller radii need only a subset of these pairs) unless capped.
        self._pairs = (nb.i, nb.j, nb.d) if nb.degree is None else None
        self.labels_, core = dbscan_from_pairs(X.shape[0], nb.i, nb.j, self.min_samples, degree=nb.degree)
        if nb.degree is not None:
            _complete_borders(X, self.labels_, core, nb.reach if nb.reach is not None else nb.degree, nb.i, nb.j, nb.eps)
        self.core_sample_indices_ = np.flatnonzero(core)
        self.n_clusters_ = int(self.labels_.max() + 1) if self.labels_.size else 0
        return self

    def labels_at(self, eps: float) -> np.ndarray:
        """DBSCAN's labels at a radius no larger than ``eps_``, from the pairs the fit found."""
        if eps >= self.eps_:
            return self.labels_
        if self._pairs is None:
            raise ValueError("labels_at needs the full pair list, which a capped fit does not keep")
        i, j, d = self._pairs
        keep = d <= np.float32(eps)
        return dbscan_from_pairs(self.labels_.size, i[keep], j[keep], self.min_samples)[0]
