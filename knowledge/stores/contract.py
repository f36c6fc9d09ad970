"""What every vector store does alike, beyond the Protocol's signatures (``base.VectorStore``).

The search methods it takes, its fault-injection hook, when a search over several collections
survives a broken one, and how candidates become ranked hits: a store only finds each collection's
best dense and sparse candidates (``CandidateSource``), ``search_many`` ranks and fuses them the same
way for Qdrant Edge and a Qdrant server, so moving to a server gives the same rankings.
``tests/knowledge/test_vector_store_contract.py`` holds every store to them.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import numpy as np

from sbcommon import faults

from .base import Hit, StoreUnavailable

logger = logging.getLogger(__name__)

METHODS = ("hybrid", "dense", "sparse")
DENSE = "dense"
SPARSE = "sparse"
# Candidates fetched per search method for every chunk asked for, before fusing.
PREFETCH_FACTOR = 4
# Qdrant's RRF constant (the server's and Edge's ``Fusion.Rrf`` default): a hit at 0-based position p scores 1 / (p + RRF_K).
RRF_K = 2


class CandidateSource(Protocol):
    """What a store gives ``search_many`` and ``evidence``, per collection (a missing one has nothing)."""

    def _candidates(self, name: str, q: np.ndarray, sparse_indices: list[int], sparse_values: list[float], kinds: list[str],
                    limit: int) -> dict[str, list[tuple[str, float]]]:
        """{kind ("dense"/"sparse"): the best ``limit`` (id, score), best first}: ids and scores only, so a search is cheap."""

    def _records(self, name: str, ids: list[str]) -> dict[str, tuple[dict[str, Any], list[float]]]:
        """{id: (payload, dense vector)} of the chunks a search returns."""

    def _term_idf(self, name: str, terms: list[int]) -> tuple[int, list[float]]:
        """(the collection's points, Qdrant's IDF of each of ``terms`` there; 0 for a term it lacks)."""


def check_method(method: str) -> None:
    """Refuse a search method no store knows (``ValueError``)."""
    if method not in METHODS:
        raise ValueError(f"unknown search method {method!r}; choose one of {', '.join(METHODS)}")


def inject_faults(name: str) -> None:
    """Fault-injection hook (``sbcommon.faults``): the store slow or down, for everyone or for some experts' collections."""
    faults.inject("vector_store", StoreUnavailable, expert=name.removeprefix("expert_"))


def check_failures(names: list[str], weights: list[float], failures: dict[str, StoreUnavailable]) -> None:
    """A fused search survives a broken *secondary* collection (skipped, logged) but not a broken primary one.

    The primary collection (highest weight: the expert the router chose first) failing raises
    ``StoreUnavailable``, so the caller fails over to the next expert; so does every collection
    failing. A collection searched only because the search widened to other experts does not
    take the whole answer down with it.
    """
    if not failures:
        return
    weighted = [(w, n) for n, w in zip(names, weights, strict=True) if w > 0]
    primary = max(weighted, key=lambda item: item[0])[1] if weighted else None
    if primary in failures or len(failures) >= len(weighted):
        raise failures.get(primary) or next(iter(failures.values()))
    logger.warning("knowledge.store.collections_skipped", extra={"collections": sorted(failures)})


def unit(dense: Any) -> np.ndarray:
    """The query as a float32 unit vector (a cosine is then a dot product)."""
    q = np.asarray(dense, dtype=np.float32)
    norm = float(np.linalg.norm(q))
    return q / norm if norm > 0 else q


def idf(df: np.ndarray, n: int) -> np.ndarray:
    """Qdrant's IDF modifier: ``ln((N - df + 0.5) / (df + 0.5) + 1)``."""
    return np.log((n - df + 0.5) / (df + 0.5) + 1.0)


def probed_idf(term: int, score: float, indices: list[int], values: list[float]) -> float:
    """A term's IDF in a collection, from its best chunk for that term alone: the score is IDF x the chunk's weight of it."""
    weight = dict(zip(indices, values, strict=True)).get(term, 0.0)
    return score / weight if weight > 0 else 0.0


def _global_values(stats: dict[str, tuple[int, list[float]]], sparse_values: list[float]) -> dict[str, list[float]]:
    """Each collection's query term values that turn its own IDF into the IDF over all of them (document frequencies add up).

    BM25 scores of two collections are comparable only with one IDF: a word rare in one expert's
    documents but common in another's must not lift the first's chunks above the second's. Qdrant
    applies each collection's own IDF; a term's value times (global IDF / own IDF) undoes it.
    ``stats`` holds each collection's (points, own IDF of each term), read from Qdrant (``_term_idf``).
    """
    df = {}
    for name, (n, own) in stats.items():
        r = np.expm1(np.asarray(own, dtype=np.float64))  # invert idf(): (N - df + 0.5) / (df + 0.5) = e^idf - 1
        df[name] = np.where(r > 0, (n + 0.5 - 0.5 * r) / (r + 1.0), 0.0)
    total = idf(sum(df.values()), sum(n for n, _ in stats.values()))
    values = np.asarray(sparse_values, dtype=np.float64)
    return {name: (values * np.divide(total, own, out=np.zeros_like(total), where=np.asarray(own) > 0)).tolist() for name, (_, own) in stats.items()}


def search_many(store: CandidateSource, names: list[str], dense: Any, sparse_indices: list[int], sparse_values: list[float], limit: int,
                method: str, weights: list[float] | None) -> list[Hit]:
    """``VectorStore.search_many`` over a store's candidates: global ranks, fused by RRF, scaled by each collection's weight.

    Each collection gives its best ``limit * PREFETCH_FACTOR`` chunks by dense cosine and by BM25
    with IDF over all the searched collections (``_global_values``). The candidates are merged into
    one dense and one sparse list by score (a collection's rank 1 is not everyone's), and a chunk's
    score is its RRF score over the lists ``method`` asks for times its collection's weight: the
    expected relevance when the weight is the probability that the answer lives there. For one
    collection of weight 1 this is Qdrant's own ``Prefetch`` + ``Fusion.Rrf``.
    """
    check_method(method)
    weights = list(weights) if weights is not None else [1.0] * len(names)
    kinds = [k for k in (DENSE, SPARSE) if method in ("hybrid", k) and (k == DENSE or sparse_indices)]
    live = [n for n, w in zip(names, weights, strict=True) if w > 0] if kinds and limit > 0 else []
    q = unit(dense)
    failures: dict[str, StoreUnavailable] = {}
    stats: dict[str, tuple[int, list[float]]] = {}
    for name in live if SPARSE in kinds and len(live) > 1 else []:
        try:
            inject_faults(name)
            stats[name] = store._term_idf(name, sparse_indices)
        except StoreUnavailable as exc:
            failures[name] = exc
    values = _global_values(stats, sparse_values) if stats else {}
    pools: dict[str, list[tuple[float, str, str]]] = {kind: [] for kind in kinds}
    for name in live:
        try:
            if name not in stats:
                inject_faults(name)
            found = {} if name in failures else store._candidates(name, q, sparse_indices, values.get(name, sparse_values), kinds, limit * PREFETCH_FACTOR)
        except StoreUnavailable as exc:
            failures[name] = exc
            continue
        for kind, hits in found.items():
            pools[kind].extend((score, name, pid) for pid, score in hits)
    check_failures(names, weights, failures)
    weight_of = dict(zip(names, weights, strict=True))
    fused: dict[tuple[str, str], float] = {}
    scores: dict[tuple[str, str, str], float] = {}  # (kind, collection, id) -> cosine or BM25 score
    for kind, pool in pools.items():
        pool.sort(key=lambda item: (-item[0], item[1], item[2]))
        for position, (score, name, pid) in enumerate(pool[: limit * PREFETCH_FACTOR]):
            fused[(name, pid)] = fused.get((name, pid), 0.0) + 1.0 / (position + RRF_K)
            scores[(kind, name, pid)] = score
    best = sorted(((key, s * weight_of[key[0]]) for key, s in fused.items()), key=lambda item: (-item[1], item[0]))[:limit]
    records: dict[str, dict[str, tuple[dict[str, Any], list[float]]]] = {}
    for name in dict.fromkeys(name for (name, _), _ in best):
        records[name] = store._records(name, [pid for (n, pid), _ in best if n == name])
    hits = []
    for (name, pid), score in best:
        payload, vector = records[name][pid]
        cosine = scores.get((DENSE, name, pid))
        hits.append(Hit(id=pid, score=score, dense_score=float(np.dot(q, vector)) if cosine is None else cosine, payload=payload,
                        sparse_score=scores.get((SPARSE, name, pid), 0.0), collection=name))
    return hits


def evidence(store: CandidateSource, names: list[str], dense: Any, sparse_indices: list[int], sparse_values: list[float]) -> dict[str, tuple[float, float] | None]:
    """``VectorStore.evidence`` over a store's candidates: each collection's best cosine and best BM25 score (None: missing or empty)."""
    q = unit(dense)
    kinds = [DENSE, SPARSE] if sparse_indices else [DENSE]
    out: dict[str, tuple[float, float] | None] = {}
    for name in names:
        inject_faults(name)
        found = store._candidates(name, q, sparse_indices, sparse_values, kinds, 1)
        best_sparse = found.get(SPARSE)
        out[name] = (found[DENSE][0][1], best_sparse[0][1] if best_sparse else 0.0) if found.get(DENSE) else None
    return out
