"""How both Qdrant stores lay out a collection with qdrant-client: named dense and sparse vectors, payload
indexes, points, and the filter that selects one document's chunks."""

from __future__ import annotations

from qdrant_client import QdrantClient, models

from .base import PointRecord

DENSE = "dense"
SPARSE = "sparse"


def create_collection(client: QdrantClient, name: str, dimension: int, payload_indexes: bool = True) -> None:
    """An empty collection of ``dimension``-dimensional cosine vectors and IDF-weighted sparse ones."""
    client.create_collection(
        name,
        vectors_config={DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)},
        sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
    )
    if payload_indexes:  # local mode has no payload indexes (it filters by scanning)
        for field_name, schema in (("document_id", models.PayloadSchemaType.INTEGER), ("expert", models.PayloadSchemaType.KEYWORD)):
            client.create_payload_index(name, field_name, field_schema=schema)


def to_points(points: list[PointRecord]) -> list[models.PointStruct]:
    """Our records as qdrant-client's points."""
    return [
        models.PointStruct(
            id=p.id,
            vector={DENSE: p.dense, SPARSE: models.SparseVector(indices=p.sparse_indices, values=p.sparse_values)},
            payload=p.payload,
        )
        for p in points
    ]


def document_filter(document_id: int, exclude_ids: list[str] | None = None) -> models.Filter:
    """The chunks of one document, but those of ``exclude_ids``."""
    must_not: list[models.Condition] = [models.HasIdCondition(has_id=exclude_ids)] if exclude_ids else []
    return models.Filter(
        must=[models.FieldCondition(key="document_id", match=models.MatchValue(value=document_id))], must_not=must_not
    )
