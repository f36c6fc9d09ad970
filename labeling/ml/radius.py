"""The radius search: every pair of rows within a cosine radius, found block by block.

``radius_pairs`` finds them in fixed memory; ``candidate_pairs`` and ``exact_within`` do it in two steps
with bfloat16 products; ``capped_pass`` keeps each row's nearest pairs where all would not fit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

import numpy as np


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


def radius_pairs(
    x: np.ndarray, eps: float, block: int | None = None, budget_bytes: int = 128 << 20, precision: str = "auto"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs ``i < j`` of rows within cosine distance ``eps``: (i, j, distance), int32/int32/float32.

    One matrix product per block of rows, upper triangle only, into buffers allocated once: the working
    memory stays at about ``budget_bytes`` whatever ``n``. Rows must be L2-normalised float32.

    ``precision="auto"`` multiplies in bfloat16 where that is at least twice as fast (CPUs with
    AMX or AVX512-BF16) and recomputes the pairs near the boundary in float32, so the pairs returned
    are the float32 ones either way; ``"float32"`` or ``"bfloat16"`` force one path.
    """
    found = candidate_pairs(x, eps, block, budget_bytes, precision)
    assert found is not None  # no max_pairs: never stops early
    return exact_within(x, *found, eps)


# A bfloat16 dot product of two unit vectors, accumulated in float32 and rounded to bfloat16, is off
# by at most about 2.5 * 2**-8 (2**-8 per rounded input vector, 2**-9 for rounding the result below
# 1); 2**-6 leaves margin. Measured on MiniLM embeddings: at most 0.003.
BF16_SLACK = 2.0**-6


@lru_cache(maxsize=1)
def _bf16_is_faster() -> bool:
    """Whether torch multiplies bfloat16 matrices at least twice as fast as numpy float32 here.

    True on CPUs with AMX or AVX512-BF16 units (several times faster), false where bfloat16 is
    emulated. Decided once per process by timing one small product each way.
    """
    import torch

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


def use_bf16(precision: str, eps: float) -> bool:
    if precision not in {"auto", "float32", "bfloat16"}:
        raise ValueError(f"precision must be 'auto', 'float32' or 'bfloat16', not {precision!r}")
    # The integer comparison of bfloat16 bit patterns below needs a positive similarity threshold.
    if precision == "float32" or 1.0 - eps - BF16_SLACK <= 0.0:
        return False
    return precision == "bfloat16" or _bf16_is_faster()


def _block_rows(n: int, block: int | None, budget_bytes: int, bytes_per_entry: int) -> int:
    """Rows per similarity block: ``block`` if given, else as many as fit ``budget_bytes``."""
    if block:
        return max(1, int(block))
    return max(16, min(n, budget_bytes // (bytes_per_entry * max(n, 1))))


def candidate_pairs(
    x: np.ndarray, eps: float, block: int | None, budget_bytes: int, precision: str, max_pairs: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
    """Pairs ``i < j`` that may be within ``eps``: (i, j, approximate distance, its error bound).

    With float32 products the list is exact and the bound 0. With bfloat16 products (several times
    faster on CPUs with AMX) every pair within ``eps`` is included, plus pairs up to ``eps + 2 slack``,
    and the distances are off by at most ``slack``; ``exact_within`` settles the doubtful ones.

    With ``max_pairs``, a pass that finds more pairs than that stops and returns ``None`` (the
    estimate that chose ``eps`` was wrong): memory stays bounded, and the caller turns to a capped
    pass.
    """
    bf16 = use_bf16(precision, eps)
    slack = BF16_SLACK if bf16 else 0.0
    threshold = _bf16_bits_at_most(1.0 - eps - slack) if bf16 else np.float32(1.0 - eps)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    kept = 0
    for _, _, _, i, j, d in _block_pairs(x, block, budget_bytes, bf16, threshold):
        parts.append((i, j, d))
        kept += i.size
        if max_pairs is not None and kept > max_pairs:
            return None
    return (*_concat(parts), slack)


def _block_pairs(
    x: np.ndarray, block: int | None, budget_bytes: int, bf16: bool, threshold: Any
) -> Iterator[tuple[int, int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """Per block of rows, (start, rows, cols, i, j, distance) of its pairs ``i < j`` whose product reaches ``threshold``
    (a float32 similarity, or bfloat16 bits from ``_bf16_bits_at_most``): one matrix product per block, upper
    triangle only, into buffers allocated once."""
    n = x.shape[0]
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
    for start in range(0, n, b):
        stop = min(n, start + b)
        rows, cols = stop - start, n - start
        if bf16:
            torch.matmul(xb[start:stop], xb[start:].T, out=sims_t[: rows * cols].view(rows, cols))
        else:
            np.matmul(x[start:stop], x[start:].T, out=values[: rows * cols].reshape(rows, cols))
        mask = mask_buf[: rows * cols]
        np.greater_equal(values[: rows * cols], threshold, out=mask)
        yield start, rows, cols, *_upper_pairs(np.flatnonzero(mask), cols, start, values[: rows * cols], bf16=bf16)


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


def exact_within(
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


def capped_pass(
    x: np.ndarray, grid: np.ndarray, cap: int, block: int | None, budget_bytes: int, bf16: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Pairs within ``max(grid)``, keeping for each row only its ``cap`` nearest later rows, with
    every row's neighbour counts within each radius of ``grid``: (i, j, d, counts, slack).

    The counts include the dropped pairs (self excluded), so core status stays exact; memory is
    ``n * cap`` pairs at most, and in dense regions the nearest pairs still connect what DBSCAN connects.

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
    threshold = _bf16_bits_at_most(1.0 - float(grid[-1]) - slack) if bf16 else np.float32(1.0) - np.float32(grid[-1])
    hist = np.zeros(n * n_edges, dtype=np.int32)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for start, rows, cols, r, c, d in _block_pairs(x, block, budget_bytes, bf16, threshold):
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

