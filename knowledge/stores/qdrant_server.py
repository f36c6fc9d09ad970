"""A Qdrant server or cluster (``QDRANT_URL``): each expert's collection is a physical collection behind an alias.

Each build is a physical collection ``<name>__<stamp>`` behind the alias ``<name>``, switched in one
alias update; replacing a document upserts its new chunks, then deletes the old ones (never a gap).
A server that cannot be reached, times out or answers 5xx raises ``StoreUnavailable``.
"""

from __future__ import annotations

import functools
import time

import httpx
import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from ..ml.index import rrf_score
from .base import Hit, PointRecord, StoreUnavailable
from .contract import PREFETCH_FACTOR, check_failures, check_method, inject_faults
from .qdrant_schema import DENSE, SPARSE, create_collection, document_filter, to_points


def _server_errors(method):
    """Turn a Qdrant server that cannot be reached, times out or answers 5xx into ``StoreUnavailable``.

    Callers (the chat path, readiness) then degrade or fail over instead of answering 500; a 4xx
    (our own mistake, e.g. a bad filter) stays what it is.
    """

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except UnexpectedResponse as exc:
            if exc.status_code is not None and exc.status_code < 500:
                raise
            raise StoreUnavailable(f"the Qdrant server answered {exc.status_code}") from exc
        except (ResponseHandlingException, httpx.HTTPError, ConnectionError, TimeoutError) as exc:
            raise StoreUnavailable(f"the Qdrant server cannot be reached ({exc.__class__.__name__})") from exc

    return wrapper


def _dense_of(point: models.ScoredPoint, q: np.ndarray) -> float:
    vector = point.vector.get(DENSE) if isinstance(point.vector, dict) else None
    return float(np.dot(q, np.asarray(vector, dtype=np.float32))) if vector is not None else 0.0


def hybrid_search(client: QdrantClient, name: str, dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int,
                  method: str = "hybrid") -> list[Hit]:
    """One collection's best ``limit`` chunks by ``method``, searched by Qdrant itself (``bench retrieval`` times local mode with it)."""
    check_method(method)
    sparse = models.SparseVector(indices=sparse_indices, values=sparse_values)
    if method == "dense":
        result = client.query_points(name, query=dense, using=DENSE, limit=limit, with_payload=True, with_vectors=[DENSE])
    elif method == "sparse":
        if not sparse_indices:
            return []
        result = client.query_points(name, query=sparse, using=SPARSE, limit=limit, with_payload=True, with_vectors=[DENSE])
    else:
        prefetch = [models.Prefetch(query=dense, using=DENSE, limit=limit * PREFETCH_FACTOR)]
        if sparse_indices:
            prefetch.append(models.Prefetch(query=sparse, using=SPARSE, limit=limit * PREFETCH_FACTOR))
        result = client.query_points(
            name, prefetch=prefetch, query=models.FusionQuery(fusion=models.Fusion.RRF), limit=limit, with_payload=True, with_vectors=[DENSE],
        )
    q = np.asarray(dense, dtype=np.float32)
    hits = []
    for point in result.points:
        score = float(point.score)
        hits.append(Hit(
            id=str(point.id), score=score, dense_score=_dense_of(point, q), payload=dict(point.payload or {}),
            sparse_score=score if method == "sparse" else 0.0, collection=name,
        ))
    return hits


class ServerQdrantStore:
    """A Qdrant server or cluster; collections live behind aliases."""

    def __init__(self, url: str, api_key: str | None = None, timeout: int = 10):
        self.client = QdrantClient(url=url, api_key=api_key, timeout=timeout)

    def _physical(self, name: str) -> str | None:
        for alias in self.client.get_aliases().aliases:
            if alias.alias_name == name:
                return alias.collection_name
        return None

    @_server_errors
    def ensure_collection(self, name: str, dimension: int) -> None:
        if self._physical(name) is None:
            physical = f"{name}__{int(time.time() * 1000)}"
            create_collection(self.client, physical, dimension)
            self.client.update_collection_aliases(
                change_aliases_operations=[models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=physical, alias_name=name))]
            )

    @_server_errors
    def replace_documents(self, name: str, documents: dict[int, list[PointRecord]]) -> None:
        # New chunks first, then the old ones go: a reader may briefly see both, never neither.
        for document_id, points in documents.items():
            for start in range(0, len(points), 256):
                self.client.upsert(name, points=to_points(points[start : start + 256]), wait=True)
            keep = [p.id for p in points]
            self.client.delete(name, points_selector=models.FilterSelector(filter=document_filter(document_id, keep)), wait=True)

    @_server_errors
    def delete_document(self, name: str, document_id: int) -> None:
        self.client.delete(name, points_selector=models.FilterSelector(filter=document_filter(document_id)), wait=True)

    @_server_errors
    def rebuild(self, name: str, dimension: int, points: list[PointRecord]) -> None:
        old = self._physical(name)
        physical = f"{name}__{int(time.time() * 1000)}"
        create_collection(self.client, physical, dimension)
        for start in range(0, len(points), 256):
            self.client.upsert(physical, points=to_points(points[start : start + 256]), wait=True)
        ops: list = []
        if old is not None:
            ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=name)))
        ops.append(models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=physical, alias_name=name)))
        self.client.update_collection_aliases(change_aliases_operations=ops)
        if old is not None:
            self.client.delete_collection(old)

    @_server_errors
    def search(self, name: str, dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5, method: str = "hybrid") -> list[Hit]:
        check_method(method)
        inject_faults([name])
        if self._physical(name) is None:
            return []
        return hybrid_search(self.client, name, dense, sparse_indices, sparse_values, limit, method)

    @_server_errors
    def search_many(self, names: list[str], dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5,
                    method: str = "hybrid", weights: list[float] | None = None) -> list[Hit]:
        """Each collection's dense and sparse candidates, merged into global lists by score, fused by weighted RRF.

        Dense cosines are comparable across collections; BM25 scores carry each collection's own
        IDF here (the embedded store uses IDF over all of them), close enough to rank candidates.
        """
        check_method(method)
        weights = list(weights) if weights is not None else [1.0] * len(names)
        prefetch = limit * PREFETCH_FACTOR
        q = np.asarray(dense, dtype=np.float32)
        pools: dict[str, list[tuple[float, str, str]]] = {"dense": [], "sparse": []}
        points: dict[tuple[str, str], models.ScoredPoint] = {}
        weight_of = dict(zip(names, weights, strict=True))
        failures: dict[str, StoreUnavailable] = {}
        queries = []
        if method != "sparse":
            queries.append(("dense", dense, DENSE))
        if method != "dense" and sparse_indices:
            queries.append(("sparse", models.SparseVector(indices=sparse_indices, values=sparse_values), SPARSE))
        for name, weight in weight_of.items():
            if weight <= 0:
                continue
            try:
                found = self._candidates(name, queries, prefetch)
            except StoreUnavailable as exc:
                failures[name] = exc
                continue
            for kind, point in found:
                pools[kind].append((float(point.score), name, str(point.id)))
                points[(name, str(point.id))] = point
        check_failures(names, weights, failures)
        fused: dict[tuple[str, str], float] = {}
        sparse_of: dict[tuple[str, str], float] = {}
        for kind, pool in pools.items():
            pool.sort(key=lambda item: -item[0])
            for position, (score, name, pid) in enumerate(pool[:prefetch]):
                fused[(name, pid)] = fused.get((name, pid), 0.0) + rrf_score(position)
                if kind == "sparse":
                    sparse_of[(name, pid)] = score
        best = sorted(((key, s * weight_of[key[0]]) for key, s in fused.items()), key=lambda item: -item[1])[:limit]
        return [
            Hit(id=pid, score=score, dense_score=_dense_of(points[(name, pid)], q), payload=dict(points[(name, pid)].payload or {}),
                sparse_score=sparse_of.get((name, pid), 0.0), collection=name)
            for (name, pid), score in best
        ]

    @_server_errors
    def _candidates(self, name: str, queries: list, prefetch: int) -> list[tuple[str, models.ScoredPoint]]:
        """One collection's dense and sparse candidates (none if it does not exist); ``StoreUnavailable`` if it cannot be reached."""
        inject_faults([name])
        if self._physical(name) is None:
            return []
        out = []
        for kind, query, using in queries:
            result = self.client.query_points(name, query=query, using=using, limit=prefetch, with_payload=True, with_vectors=[DENSE])
            out.extend((kind, point) for point in result.points)
        return out

    @_server_errors
    def evidence(self, names: list[str], dense: list[float], sparse_indices: list[int], sparse_values: list[float]) -> dict[str, tuple[float, float] | None]:
        sparse = models.SparseVector(indices=sparse_indices, values=sparse_values)
        dense = [float(v) for v in dense]  # the caller may pass a numpy vector; the client sends JSON
        out: dict[str, tuple[float, float] | None] = {}
        for name in names:
            inject_faults([name])
            if self._physical(name) is None:
                out[name] = None
                continue
            top = self.client.query_points(name, query=dense, using=DENSE, limit=1).points
            if not top:
                out[name] = None
                continue
            best_sparse = self.client.query_points(name, query=sparse, using=SPARSE, limit=1).points if sparse_indices else []
            out[name] = (float(top[0].score), float(best_sparse[0].score) if best_sparse else 0.0)
        return out

    @_server_errors
    def count(self, name: str) -> int:
        if self._physical(name) is None:
            return 0
        return int(self.client.count(name, exact=True).count)

    @_server_errors
    def drop(self, name: str) -> None:
        physical = self._physical(name)
        if physical is not None:
            self.client.update_collection_aliases(
                change_aliases_operations=[models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=name))]
            )
            self.client.delete_collection(physical)

    @_server_errors
    def health(self) -> None:
        self.client.get_collections()
