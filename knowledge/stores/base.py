"""The vector-store interface every backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class StoreUnavailable(RuntimeError):
    """The vector store cannot be reached or answered with an error: the expert's retrieval is down."""


@dataclass
class PointRecord:
    """One chunk to index: id, dense vector, sparse (indices, values) and payload."""

    id: str
    dense: list[float]
    sparse_indices: list[int]
    sparse_values: list[float]
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass
class Hit:
    """One search result: its score (fused rank score for hybrid), the dense cosine and BM25 scores, the payload, and its collection."""

    id: str
    score: float
    dense_score: float
    payload: dict[str, Any]
    sparse_score: float = 0.0
    collection: str = ""


class VectorStore(Protocol):
    """One collection per expert; documents are replaced atomically; hybrid dense+sparse search."""

    def ensure_collection(self, name: str, dimension: int) -> None: ...

    def replace_documents(self, name: str, documents: dict[int, list[PointRecord]]) -> None:
        """Swap all chunks of each document for its new points; searches see the old or the new set, never a mix."""

    def delete_document(self, name: str, document_id: int) -> None: ...

    def set_payloads(self, name: str, payloads: dict[str, dict[str, Any]]) -> None:
        """Add each ``payloads[id]``'s keys to that point's payload, vectors untouched; an id no longer in the collection
        (its document re-indexed or deleted since) is skipped."""

    def rebuild(self, name: str, dimension: int, points: list[PointRecord]) -> None:
        """Fill a fresh copy of the collection and switch to it in one step."""

    def search(self, name: str, dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5, method: str = "hybrid") -> list[Hit]:
        """The best ``limit`` chunks by ``method``: "hybrid" (dense and sparse fused by RRF), "dense" or "sparse"."""

    def search_many(self, names: list[str], dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5,
                    method: str = "hybrid", weights: list[float] | None = None) -> list[Hit]:
        """One search over several collections with global ranks, each collection's hits scaled by its weight (0: skipped)."""

    def evidence(self, names: list[str], dense: list[float], sparse_indices: list[int], sparse_values: list[float]) -> dict[str, tuple[float, float] | None]:
        """Each collection's (best dense cosine, best BM25 score) for one question; None for a collection that is missing or empty.

        ``dense`` may be a numpy vector (the serving path passes the encoder's own, saving a conversion per lookup).
        """

    def count(self, name: str) -> int: ...

    def drop(self, name: str) -> None: ...

    def health(self) -> None:
        """Raise if the store cannot be used."""
