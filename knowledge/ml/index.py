"""An in-memory hybrid index: exact dense search with numpy and BM25 sparse search with scipy.

Qdrant's local mode searches by brute force in Python (~30 ms at 10k points). This index does the
same exact search as one float32 matrix-vector product (dense) and one sparse column slice (BM25),
about 1 ms at 10k chunks, and fuses the two lists with Qdrant's RRF, so its results match what a
Qdrant server returns for the same points (same IDF formula, same fusion constant).

The embedded store builds one per snapshot and saves it beside the snapshot; readers load it and
never open Qdrant's folder, so they never hold its lock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse as sp

# Qdrant's RRF constant (qdrant_client.hybrid.fusion.DEFAULT_RANKING_CONSTANT_K and the server's default).
RRF_K = 2
METHODS = ("hybrid", "dense", "sparse")
FORMAT_VERSION = 1


@dataclass
class IndexHit:
    """One result row: the fused (or single-method) score, and the dense and sparse scores behind it."""

    row: int
    score: float
    dense_score: float
    sparse_score: float


def rrf_score(position: int, weight: float = 1.0, k: int = RRF_K) -> float:
    """Qdrant's weighted RRF contribution of 0-based ``position``: ``1 / ((position + 1) / weight + k - 1)``."""
    if weight <= 0:
        return 0.0
    return 1.0 / ((position + 1.0) / weight + k - 1.0)


def bm25_idf(df: np.ndarray, n: int) -> np.ndarray:
    """Qdrant's IDF modifier: ``ln((N - df + 0.5) / (df + 0.5) + 1)``."""
    df = df.astype(np.float64)
    return np.log((n - df + 0.5) / (df + 0.5) + 1.0).astype(np.float32)


def _top(scores: np.ndarray, k: int, candidates: np.ndarray | None = None) -> np.ndarray:
    """Rows of the ``k`` highest scores, best first (ties by row, so results are stable)."""
    rows = np.arange(scores.shape[0]) if candidates is None else candidates
    values = scores if candidates is None else scores[candidates]
    if rows.size == 0 or k <= 0:
        return rows[:0]
    if rows.size > k:
        part = np.argpartition(-values, k - 1)[:k]
        rows, values = rows[part], values[part]
    order = np.lexsort((rows, -values))
    return rows[order]


class HybridIndex:
    """Dense vectors (n, d), sparse BM25 term weights (n, V) over a term vocabulary, ids and payloads."""

    def __init__(self, ids: Sequence[str], dense: np.ndarray, sparse_matrix: sp.csr_matrix, terms: np.ndarray, payloads: Sequence[dict[str, Any]], dimension: int | None = None):
        n = len(ids)
        if dense.shape[0] != n or sparse_matrix.shape[0] != n or len(payloads) != n:
            raise ValueError("ids, dense rows, sparse rows and payloads must have the same length")
        self.ids = list(ids)
        self.dense = np.ascontiguousarray(dense, dtype=np.float32)
        self.dimension = int(dimension if dimension is not None else dense.shape[1])
        self.sparse = sparse_matrix.tocsr().astype(np.float32)
        self.terms = np.asarray(terms, dtype=np.int64)
        self.payloads = list(payloads)
        # Column access for query terms; document frequencies for the IDF.
        self._csc = self.sparse.tocsc()
        self._df = np.diff(self._csc.indptr)
        self.idf = bm25_idf(self._df, n)

    def __len__(self) -> int:
        return len(self.ids)

    # -- building ----------------------------------------------------------------------------
    @classmethod
    def from_points(cls, ids: Sequence[str], dense: Sequence[Sequence[float]] | np.ndarray, sparse_indices: Sequence[Sequence[int]],
                    sparse_values: Sequence[Sequence[float]], payloads: Sequence[dict[str, Any]], dimension: int | None = None) -> HybridIndex:
        """Build from per-point dense vectors and sparse (indices, values); dense rows are L2-normalised (cosine)."""
        n = len(ids)
        matrix = np.asarray(dense, dtype=np.float32).reshape(n, -1) if n else np.zeros((0, dimension or 0), dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = matrix / np.where(norms > 0, norms, 1.0)
        lengths = [len(i) for i in sparse_indices]
        flat_terms = np.fromiter((t for row in sparse_indices for t in row), dtype=np.int64, count=sum(lengths))
        flat_values = np.fromiter((v for row in sparse_values for v in row), dtype=np.float32, count=sum(lengths))
        terms, columns = np.unique(flat_terms, return_inverse=True)
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        matrix_sparse = sp.csr_matrix((flat_values, columns.astype(np.int64), indptr), shape=(n, terms.size))
        matrix_sparse.sum_duplicates()
        return cls(ids, matrix, matrix_sparse, terms, payloads, dimension=dimension if dimension is not None else (matrix.shape[1] if n else 0))

    @classmethod
    def concat(cls, indexes: Sequence[HybridIndex]) -> HybridIndex:
        """One index over several (a flat search across collections, with IDF over all of them)."""
        indexes = [ix for ix in indexes if len(ix)]
        if not indexes:
            return cls.from_points([], [], [], [], [])
        terms = np.unique(np.concatenate([ix.terms for ix in indexes]))
        blocks = []
        for ix in indexes:
            coo = ix.sparse.tocoo()
            remapped = np.searchsorted(terms, ix.terms)[coo.col]
            blocks.append(sp.csr_matrix((coo.data, (coo.row, remapped)), shape=(len(ix), terms.size)))
        return cls(
            [i for ix in indexes for i in ix.ids], np.vstack([ix.dense for ix in indexes]), sp.vstack(blocks).tocsr(), terms,
            [p for ix in indexes for p in ix.payloads], dimension=indexes[0].dimension,
        )

    # -- scoring -----------------------------------------------------------------------------
    def dense_scores(self, query: Sequence[float] | np.ndarray) -> np.ndarray:
        """Cosine similarity of every row with ``query``."""
        q = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(q))
        if norm > 0:
            q = q / norm
        # einsum, not BLAS: a matrix-vector product this size is ~0.5 ms on one core, and BLAS threads
        # fighting over shared cores made it 10-20x slower (MEASURED.md, "thread oversubscription").
        return np.einsum("ij,j->i", self.dense, q)

    def idf_of(self, terms: np.ndarray) -> np.ndarray:
        """The IDF of each term (0 for a term no row holds)."""
        terms = np.asarray(terms, dtype=np.int64)
        if not self.terms.size:
            return np.zeros(terms.size, dtype=np.float32)
        pos = np.minimum(np.searchsorted(self.terms, terms), self.terms.size - 1)
        return np.where(self.terms[pos] == terms, self.idf[pos], 0.0).astype(np.float32)

    def sparse_scores(self, indices: Sequence[int], values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """(scores of every row, rows with at least one query term) for a BM25 query with the collection's IDF."""
        n = len(self.ids)
        rows, row_weights = self._query_postings(indices, values)
        if not rows.size:
            return np.zeros(n, dtype=np.float32), np.zeros(0, dtype=np.int64)
        scores = np.bincount(rows, weights=row_weights, minlength=n).astype(np.float32)
        return scores, np.unique(rows)

    def _query_postings(self, indices: Sequence[int], values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """``_term_postings`` of the query's terms this collection knows (none: two empty arrays)."""
        if not len(indices) or not len(self.ids) or not self.terms.size:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        q_terms = np.asarray(indices, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.terms, q_terms), self.terms.size - 1)
        known = self.terms[pos] == q_terms
        if not known.any():
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return self._term_postings(pos[known], np.asarray(values, dtype=np.float32)[known])

    def _term_postings(self, cols: np.ndarray, q_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, weight) of every posting of the query's term columns ``cols``: query value x IDF x the row's BM25 weight.

        Read straight from the CSC arrays: the same sums as ``csc[:, cols] @ weights`` without scipy's
        fancy indexing (0.116 against 0.154 ms per question over doc2dial's 2,167 chunks; every search
        and every routing-evidence lookup runs this).
        """
        csc = self._csc
        weights = q_values.astype(np.float32) * self.idf[cols]
        starts, ends = csc.indptr[cols], csc.indptr[cols + 1]
        lengths = ends - starts
        if not lengths.sum():
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        # Positions of every posting: each column's start repeated over its length, plus 0..length-1.
        offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        take = np.repeat(starts, lengths) + offsets
        return csc.indices[take].astype(np.int64), np.repeat(weights, lengths) * csc.data[take]

    def best_scores(self, dense: Sequence[float] | np.ndarray, sparse_indices: Sequence[int], sparse_values: Sequence[float]) -> tuple[float, float]:
        """(best dense cosine, best BM25 score) of any row for one question: its evidence in this collection (0, 0 when empty)."""
        if not len(self.ids):
            return 0.0, 0.0
        best_dense = float(self.dense_scores(dense).max())
        return best_dense, self._best_sparse(sparse_indices, sparse_values)

    def _best_sparse(self, indices: Sequence[int], values: Sequence[float]) -> float:
        """``sparse_scores``' best score over the matched rows without listing them (0 when none matched).

        Every posting's weight is positive (query term counts x IDF x BM25 weights), so the best
        matched row is the highest of all rows' sums; unmatched rows sum to 0.
        """
        rows, row_weights = self._query_postings(indices, values)
        if not rows.size:
            return 0.0
        return float(np.bincount(rows, weights=row_weights, minlength=len(self.ids)).astype(np.float32).max())

    def search(self, dense: Sequence[float] | np.ndarray, sparse_indices: Sequence[int], sparse_values: Sequence[float], limit: int = 5,
               method: str = "hybrid", prefetch: int | None = None, weights: tuple[float, float] = (1.0, 1.0)) -> list[IndexHit]:
        """The best ``limit`` rows by ``method``: dense, sparse, or both fused by RRF over ``prefetch`` candidates each."""
        if method not in METHODS:
            raise ValueError(f"unknown search method {method!r}; choose one of {', '.join(METHODS)}")
        if not len(self.ids) or limit <= 0:
            return []
        # Both scores are computed whatever the method (about a millisecond at 10k rows), so every hit carries both.
        d_scores = self.dense_scores(dense)
        s_scores, matched = self.sparse_scores(sparse_indices, sparse_values)
        if method == "dense":
            rows = _top(d_scores, limit)
            return [IndexHit(int(r), float(d_scores[r]), float(d_scores[r]), float(s_scores[r])) for r in rows]
        if method == "sparse":
            rows = _top(s_scores, limit, matched)
            return [IndexHit(int(r), float(s_scores[r]), float(d_scores[r]), float(s_scores[r])) for r in rows]
        prefetch = prefetch or limit * 4
        fused: dict[int, float] = {}
        for w, rows in ((weights[0], _top(d_scores, prefetch)), (weights[1], _top(s_scores, prefetch, matched))):
            for position, row in enumerate(rows):
                fused[int(row)] = fused.get(int(row), 0.0) + rrf_score(position, w)
        best = sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:limit]
        return [IndexHit(r, s, float(d_scores[r]), float(s_scores[r])) for r, s in best]

    # -- persistence -------------------------------------------------------------------------
    def save(self, folder: str | os.PathLike[str]) -> None:
        """Write the index into ``folder`` (created); ``meta.json`` goes last, so a complete folder has one."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "dense.npy", self.dense, allow_pickle=False)
        np.save(folder / "terms.npy", self.terms, allow_pickle=False)
        np.save(folder / "sparse_data.npy", self.sparse.data, allow_pickle=False)
        np.save(folder / "sparse_indices.npy", self.sparse.indices.astype(np.int64), allow_pickle=False)
        np.save(folder / "sparse_indptr.npy", self.sparse.indptr.astype(np.int64), allow_pickle=False)
        with open(folder / "points.json", "w", encoding="utf-8") as handle:
            json.dump({"ids": self.ids, "payloads": self.payloads}, handle, ensure_ascii=False, separators=(",", ":"))
        (folder / "meta.json").write_text(json.dumps({"format": FORMAT_VERSION, "points": len(self.ids), "dimension": self.dimension}))

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> HybridIndex:
        """Read an index written by ``save``; ``FileNotFoundError`` if it is missing or incomplete."""
        folder = Path(folder)
        meta = json.loads((folder / "meta.json").read_text())
        if meta.get("format") != FORMAT_VERSION:
            raise FileNotFoundError(f"{folder}: index format {meta.get('format')} is not {FORMAT_VERSION}")
        dense = np.load(folder / "dense.npy", allow_pickle=False)
        terms = np.load(folder / "terms.npy", allow_pickle=False)
        data = np.load(folder / "sparse_data.npy", allow_pickle=False)
        indices = np.load(folder / "sparse_indices.npy", allow_pickle=False)
        indptr = np.load(folder / "sparse_indptr.npy", allow_pickle=False)
        with open(folder / "points.json", encoding="utf-8") as handle:
            points = json.load(handle)
        n = len(points["ids"])
        matrix = sp.csr_matrix((data, indices, indptr), shape=(n, terms.size))
        return cls(points["ids"], dense.reshape(n, -1) if n else np.zeros((0, meta["dimension"]), np.float32), matrix, terms, points["payloads"], dimension=meta["dimension"])


@dataclass
class MultiHit:
    """A result of a search over several indexes: which index, which row, and the scores."""

    index: int
    row: int
    score: float
    dense_score: float
    sparse_score: float


def search_indexes(indexes: Sequence[HybridIndex], dense: Sequence[float] | np.ndarray, sparse_indices: Sequence[int], sparse_values: Sequence[float],
                   limit: int = 5, method: str = "hybrid", weights: Sequence[float] | None = None, prefetch: int | None = None) -> list[MultiHit]:
    """One search over several indexes as if they were one, each index's hits scaled by its weight.

    Ranks are global: the dense list is the best cosines over every index, and the sparse list uses
    IDF over all of them (document frequencies add up), so scores are comparable across indexes,
    which per-index ranks are not (every index has a rank 1). The fused score of a chunk is its RRF
    score (over the dense and sparse lists, or the one list of ``method``) times its index's weight:
    the expected relevance when the weight is the probability that the answer lives in that index.
    Weights of 1 make this the flat search; an index with weight 0 is not searched.
    """
    if method not in METHODS:
        raise ValueError(f"unknown search method {method!r}; choose one of {', '.join(METHODS)}")
    weights = list(weights) if weights is not None else [1.0] * len(indexes)
    if len(weights) != len(indexes):
        raise ValueError("one weight per index")
    live = [(i, ix, w) for i, (ix, w) in enumerate(zip(indexes, weights, strict=True)) if w > 0 and len(ix)]
    if not live or limit <= 0:
        return []
    prefetch = prefetch or limit * 4
    owner = np.concatenate([np.full(len(ix), k, dtype=np.int64) for k, (_, ix, _) in enumerate(live)])
    local = np.concatenate([np.arange(len(ix), dtype=np.int64) for _, ix, _ in live])
    row_weight = np.asarray([w for _, _, w in live], dtype=np.float64)[owner]
    query = np.asarray(dense, dtype=np.float32)  # once, not once per index (the caller may hold a list)
    d_scores = np.concatenate([ix.dense_scores(query) for _, ix, _ in live])
    s_scores = np.zeros_like(d_scores)
    matched = np.zeros(0, dtype=np.int64)
    if len(sparse_indices):  # computed for the dense method too, so every hit carries both scores
        # Global IDF: N and the document frequencies summed over the searched indexes.
        q_terms = np.asarray(sparse_indices, dtype=np.int64)
        df = np.zeros(q_terms.size, dtype=np.int64)
        for _, ix, _ in live:
            if ix.terms.size:
                pos = np.minimum(np.searchsorted(ix.terms, q_terms), ix.terms.size - 1)
                df += np.where(ix.terms[pos] == q_terms, ix._df[pos], 0)
        idf = bm25_idf(df, int(owner.size))
        q_values = np.asarray(sparse_values, dtype=np.float32) * idf
        parts, hits, offset = [], [], 0
        for _, ix, _ in live:
            own = ix.idf_of(q_terms)
            ratio = np.divide(q_values, own, out=np.zeros_like(q_values), where=own > 0)
            scores, rows = ix.sparse_scores(q_terms, ratio)  # the index applies its own IDF; the ratio swaps it for the global one
            parts.append(scores)
            hits.append(rows + offset)
            offset += len(ix)
        s_scores = np.concatenate(parts)
        matched = np.concatenate(hits)
    lists = []
    if method != "sparse":
        lists.append(_top(d_scores, prefetch if method == "hybrid" else limit * 4))
    if method != "dense":
        lists.append(_top(s_scores, prefetch if method == "hybrid" else limit * 4, matched))
    fused: dict[int, float] = {}
    for rows in lists:
        for position, row in enumerate(rows):
            fused[int(row)] = fused.get(int(row), 0.0) + rrf_score(position)
    best = sorted(((r, s * row_weight[r]) for r, s in fused.items()), key=lambda item: (-item[1], item[0]))[:limit]
    return [MultiHit(live[owner[r]][0], int(local[r]), float(s), float(d_scores[r]), float(s_scores[r])) for r, s in best]
