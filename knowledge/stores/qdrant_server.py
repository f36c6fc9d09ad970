"""A Qdrant server or cluster (``QDRANT_URL``): each expert's collection is a physical collection behind an alias.

Each build is a physical collection ``<name>__<stamp>`` behind the alias ``<name>``, switched in one
alias update; replacing a document upserts its new chunks, then deletes the old ones (never a gap).
A server that cannot be reached, times out or answers 5xx raises ``StoreUnavailable``. Collections
are laid out as Qdrant Edge's shards are (cosine dense vectors, Qdrant's BM25 terms with the IDF
modifier) and searched through the same ``contract.search_many``: the same rankings as the embedded store.
"""

from __future__ import annotations

import functools
import time
import uuid
from typing import Any

import httpx
import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from .base import Hit, PointRecord, StoreUnavailable
from .contract import DENSE, SPARSE, evidence, probed_idf, search_many


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


def create_collection(client: QdrantClient, name: str, dimension: int) -> None:
    """An empty collection of cosine vectors and IDF-weighted sparse ones (Qdrant Edge's layout), with payload indexes."""
    client.create_collection(
        name,
        vectors_config={DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)},
        sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
    )
    if client.init_options.get("location") != ":memory:":  # local mode has none (it filters by scanning)
        for field_name, schema in (("document_id", models.PayloadSchemaType.INTEGER), ("expert", models.PayloadSchemaType.KEYWORD)):
            client.create_payload_index(name, field_name, field_schema=schema)


def to_points(points: list[PointRecord]) -> list[models.PointStruct]:
    return [models.PointStruct(id=p.id, vector={DENSE: p.dense, SPARSE: models.SparseVector(indices=p.sparse_indices, values=p.sparse_values)},
                               payload=p.payload) for p in points]


def document_filter(document_id: int, exclude_ids: list[str] | None = None) -> models.Filter:
    """The chunks of one document, but those of ``exclude_ids``."""
    must_not: list[models.Condition] = [models.HasIdCondition(has_id=exclude_ids)] if exclude_ids else []
    return models.Filter(must=[models.FieldCondition(key="document_id", match=models.MatchValue(value=document_id))], must_not=must_not)


def _build_name(name: str) -> str:
    """A new physical collection behind the alias ``name``: its build time and a random part, since two builds within
    one millisecond (a collection made, then rebuilt at once) met the same name ("already exists")."""
    return f"{name}__{int(time.time() * 1000)}_{uuid.uuid4().hex[:8]}"


class ServerQdrantStore:
    """A Qdrant server or cluster; collections live behind aliases."""

    def __init__(self, url: str, api_key: str | None = None, timeout: int = 10):
        """``url`` may be ":memory:": qdrant-client's local mode, through which the contract tests run this code without a server."""
        self.client = QdrantClient(location=url, api_key=api_key, timeout=timeout)

    def _physical(self, name: str) -> str | None:
        for alias in self.client.get_aliases().aliases:
            if alias.alias_name == name:
                return alias.collection_name
        return None

    @_server_errors
    def ensure_collection(self, name: str, dimension: int) -> None:
        if self._physical(name) is None:
            physical = _build_name(name)
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
    def set_payloads(self, name: str, payloads: dict[str, dict[str, Any]]) -> None:
        ids = list(payloads)
        for start in range(0, len(ids), 256):
            part = ids[start : start + 256]
            present = {str(r.id) for r in self.client.retrieve(name, part, with_payload=False, with_vectors=False)}
            ops = [models.SetPayloadOperation(set_payload=models.SetPayload(payload=payloads[i], points=[i])) for i in part if i in present]
            if ops:
                self.client.batch_update_points(name, ops, wait=True)

    @_server_errors
    def rebuild(self, name: str, dimension: int, points: list[PointRecord]) -> None:
        old = self._physical(name)
        physical = _build_name(name)
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
        return search_many(self, [name], dense, sparse_indices, sparse_values, limit, method, None)

    @_server_errors
    def search_many(self, names: list[str], dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5,
                    method: str = "hybrid", weights: list[float] | None = None) -> list[Hit]:
        return search_many(self, names, dense, sparse_indices, sparse_values, limit, method, weights)

    @_server_errors
    def evidence(self, names: list[str], dense: Any, sparse_indices: list[int], sparse_values: list[float]) -> dict[str, tuple[float, float] | None]:
        return evidence(self, names, dense, sparse_indices, sparse_values)

    @_server_errors
    def _candidates(self, name: str, q: np.ndarray, sparse_indices: list[int], sparse_values: list[float], kinds: list[str],
                    limit: int) -> dict[str, list[tuple[str, float]]]:
        if self._physical(name) is None:
            return {}
        vectors = {DENSE: q.tolist(), SPARSE: models.SparseVector(indices=sparse_indices, values=sparse_values)}
        found = self.client.query_batch_points(name, requests=[models.QueryRequest(query=vectors[k], using=k, limit=limit) for k in kinds])
        return {kind: [(str(p.id), float(p.score)) for p in result.points] for kind, result in zip(kinds, found, strict=True)}

    @_server_errors
    def _records(self, name: str, ids: list[str]) -> dict[str, tuple[dict[str, Any], list[float]]]:
        found = self.client.retrieve(name, ids=ids, with_payload=True, with_vectors=[DENSE])
        return {str(r.id): (dict(r.payload or {}), r.vector[DENSE]) for r in found}  # type: ignore[index]

    @_server_errors
    def _term_idf(self, name: str, terms: list[int]) -> tuple[int, list[float]]:
        if not terms or self._physical(name) is None:
            return 0, [0.0] * len(terms)
        probes = [models.QueryRequest(query=models.SparseVector(indices=[t], values=[1.0]), using=SPARSE, limit=1, with_vector=[SPARSE]) for t in terms]
        found = [r.points for r in self.client.query_batch_points(name, requests=probes)]
        return (int(self.client.count(name, exact=True).count),
                [probed_idf(t, p[0].score, p[0].vector[SPARSE].indices, p[0].vector[SPARSE].values) if p else 0.0 for t, p in zip(terms, found, strict=True)])

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
