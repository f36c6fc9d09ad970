"""Ingesting, indexing and searching experts' knowledge bases."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from experts.models import Expert
from jobs.services import JobReporter
from sbcommon.encoders import get_encoder
from sbcommon.hashing import text_hash

from .ml.chunking import chunk_text
from .ml.fusion import minmax
from .ml.sparse import bm25_vector
from .models import Document
from .stores import Hit, PointRecord, get_store

logger = logging.getLogger(__name__)
POINT_NAMESPACE = uuid.UUID("6f1c1f6e-6c57-4d0c-9a55-9b1c2b3b6a11")


def collection_name(expert: Expert) -> str:
    """The expert's collection (an alias on a Qdrant server)."""
    return f"expert_{expert.slug}"


@dataclass
class DocumentInput:
    """A parsed document ready to store."""

    external_id: str
    title: str
    text: str
    url: str = ""
    metadata: dict[str, Any] | None = None


@transaction.atomic
def upsert_document(expert: Expert, doc: DocumentInput) -> tuple[Document, bool]:
    """Store a document version; returns (document, changed). Same content → nothing changes."""
    if not doc.text.strip():
        raise ValueError(f"document {doc.external_id!r} has no text")
    digest = text_hash(doc.text)
    existing = Document.objects.select_for_update().filter(expert=expert, external_id=doc.external_id).first()
    if existing is not None and existing.content_hash == digest:
        return existing, False
    if existing is None:
        document = Document.objects.create(
            expert=expert, external_id=doc.external_id, title=doc.title[:500] or doc.external_id, url=doc.url,
            content_hash=digest, text=doc.text, metadata=doc.metadata or {},
        )
    else:
        existing.title, existing.url, existing.text = doc.title[:500] or doc.external_id, doc.url, doc.text
        existing.content_hash, existing.metadata = digest, doc.metadata or {}
        existing.version += 1
        existing.indexed_at = None
        existing.save()
        document = existing
    return document, True


def _points(expert: Expert, document: Document) -> list[PointRecord]:
    chunks = chunk_text(document.text, size=expert.chunk_size, overlap=min(expert.chunk_overlap, expert.chunk_size // 2 - 1))
    if not chunks:
        return []
    texts = [f"{document.title}\n{c.text}" for c in chunks]
    vectors = get_encoder().encode(texts)
    points = []
    for chunk, vector in zip(chunks, vectors, strict=True):
        indices, values = bm25_vector(f"{document.title} {chunk.text}")
        points.append(
            PointRecord(
                id=str(uuid.uuid5(POINT_NAMESPACE, f"{document.pk}:{document.content_hash}:{chunk.position}")),
                dense=vector.tolist(), sparse_indices=indices, sparse_values=values,
                payload={
                    "expert": expert.slug, "document_id": document.pk, "document_version": document.version,
                    "title": document.title, "url": document.url, "position": chunk.position,
                    "heading": chunk.heading, "text": chunk.text,
                },
            )
        )
    return points


def index_documents(expert: Expert, documents: list[Document]) -> int:
    """(Re)index these documents' chunks in one atomic swap; returns the number of chunks."""
    store = get_store()
    store.ensure_collection(collection_name(expert), get_encoder().dimension)
    batch = {document.pk: _points(expert, document) for document in documents}
    store.replace_documents(collection_name(expert), batch)
    now = timezone.now()
    for document in documents:
        # Only marks the version that was indexed: a newer upload stays pending.
        Document.objects.filter(pk=document.pk, content_hash=document.content_hash).update(chunk_count=len(batch[document.pk]), indexed_at=now)
    return sum(len(points) for points in batch.values())


def index_pending(expert: Expert, reporter: JobReporter | None = None, batch_size: int = 50) -> dict[str, int]:
    """Index every document of ``expert`` not indexed at its current version (resumable, in batches)."""
    reporter = reporter or JobReporter()
    pending = list(Document.objects.filter(expert=expert, indexed_at__isnull=True).order_by("pk"))
    chunks = 0
    for start in range(0, len(pending), batch_size):
        part = pending[start : start + batch_size]
        chunks += index_documents(expert, part)
        reporter.progress((start + len(part)) / len(pending), f"indexed {start + len(part)}/{len(pending)} documents")
    return {"documents": len(pending), "chunks": chunks}


def rebuild_index(expert: Expert, reporter: JobReporter | None = None) -> dict[str, int]:
    """Re-chunk and re-embed every document into a fresh collection, then switch to it."""
    reporter = reporter or JobReporter()
    documents = list(Document.objects.filter(expert=expert).order_by("pk"))
    points: list[PointRecord] = []
    counts = {}
    for i, document in enumerate(documents, start=1):
        doc_points = _points(expert, document)
        counts[document.pk] = len(doc_points)
        points.extend(doc_points)
        reporter.progress(0.9 * i / max(1, len(documents)), f"embedded {i}/{len(documents)} documents")
    get_store().rebuild(collection_name(expert), get_encoder().dimension, points)
    now = timezone.now()
    for pk, n in counts.items():
        Document.objects.filter(pk=pk).update(chunk_count=n, indexed_at=now)
    return {"documents": len(documents), "chunks": len(points)}


def search_expert(expert: Expert, question: str, limit: int = 5, query_vector: list[float] | None = None) -> list[Hit]:
    """Hybrid (dense + sparse, RRF-fused) search of one expert's collection."""
    dense = query_vector if query_vector is not None else get_encoder().encode([question])[0].tolist()
    indices, values = bm25_vector(question, query=True)
    return get_store().search(collection_name(expert), dense, indices, values, limit=limit)


def search_experts(experts: list[Expert], question: str, limit: int = 5, weights: list[float] | None = None, query_vector: list[float] | None = None) -> list[Hit]:
    """Search several experts' collections and fuse them.

    Each expert's dense similarities are kept as they are (comparable across collections, since
    the encoder is shared); the fused order is by dense similarity weighted by the router's
    confidence in that expert, so a confident first choice is not drowned by a weak second one.
    """
    if not experts:
        return []
    dense = query_vector if query_vector is not None else get_encoder().encode([question])[0].tolist()
    weights = weights or [1.0] * len(experts)
    norm_weights = minmax(weights) if len(weights) > 1 else [1.0]
    scored: list[tuple[float, Hit]] = []
    for expert, w in zip(experts, norm_weights, strict=True):
        for hit in search_expert(expert, question, limit=limit, query_vector=dense):
            scored.append((hit.dense_score * (0.85 + 0.15 * w), hit))
    scored.sort(key=lambda item: item[0], reverse=True)
    return [hit for _, hit in scored[:limit]]


def delete_document(document: Document) -> None:
    """Remove a document and its chunks."""
    get_store().delete_document(collection_name(document.expert), document.pk)
    document.delete()
