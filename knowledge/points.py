"""What a document becomes in its expert's collection: chunks, each with its title, as points with vectors and payloads.

``knowledge.indexing`` writes these points; the evaluations embed chunks the same way (``embedding_text``,
``sparse_text``).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings

from encoders import get_encoder
from experts.models import Expert

from .ml import chunking
from .ml.chunking import Chunk, chunk_text, section_title
from .ml.sentences import pack_vectors
from .ml.sparse import bm25_vector
from .models import Document
from .stores import PointRecord

POINT_NAMESPACE = uuid.UUID("6f1c1f6e-6c57-4d0c-9a55-9b1c2b3b6a11")
CHUNK_SIZE_RANGE = (100, 8000)


def chunk_settings(expert: Expert) -> tuple[int, int]:
    """(size, overlap) for ``expert``, the overlap clamped below half the size as the chunker requires."""
    size = max(CHUNK_SIZE_RANGE[0], int(expert.chunk_size))
    return size, max(0, min(int(expert.chunk_overlap), size // 2 - 1))


def chunk_by_sections() -> bool:
    """Whether documents are chunked by their sections (``knowledge.ml.chunking.CHUNK_BY_SECTIONS``)."""
    return chunking.CHUNK_BY_SECTIONS


def chunk_document(title: str, text: str, size: int, overlap: int, sections: bool | None = None) -> list[tuple[Chunk, str]]:
    """A document's chunks, each with its title: "Document — Section" when chunking by sections, else the document's.

    The title is what the chunk's embedding and BM25 terms start with and what its citation shows.
    ``sections`` None: ``chunk_by_sections()``.
    """
    sections = chunk_by_sections() if sections is None else sections
    chunks = chunk_text(text, size=size, overlap=overlap, sections=sections)
    return [(chunk, section_title(title, chunk.path) if sections else title) for chunk in chunks]


def document_url(document: Document) -> str:
    """The page a document came from: its ``url``, else ``metadata.url`` (web addresses only, for citations)."""
    for url in (document.url, (document.metadata or {}).get("url")):
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            return url[:1000]
    return ""


def embedding_text(title: str, chunk: str) -> str:
    """What a chunk's dense vector is made from: the chunk's title (document and section) gives it its context."""
    return f"{title}\n{chunk}"


def sparse_text(title: str, chunk: str) -> str:
    return f"{title} {chunk}"


def document_points(expert: Expert, document: Document) -> list[PointRecord]:
    """The document's chunks as points. The payload's ``title`` is the chunk's citation title ("Document —
    Section"), ``document_title`` the document's; ``url`` the page it came from and ``source`` its
    ``metadata.source`` (where the document came from, when it has no page address)."""
    size, overlap = chunk_settings(expert)
    chunks = chunk_document(document.title, document.text, size, overlap)
    if not chunks:
        return []
    encoder = get_encoder()
    batch_size = settings.EMBEDDING_BATCH_SIZE
    vectors = encoder.encode([embedding_text(title, c.text) for c, title in chunks], batch_size=batch_size)
    sentences = _sentence_payloads([c.text for c, _ in chunks], encoder, batch_size)
    url = document_url(document)
    source = str((document.metadata or {}).get("source") or "")[:500]
    points = []
    for (chunk, title), vector, extra in zip(chunks, vectors, sentences, strict=True):
        indices, values = bm25_vector(sparse_text(title, chunk.text))
        points.append(
            PointRecord(
                id=str(uuid.uuid5(POINT_NAMESPACE, f"{document.pk}:{document.content_hash}:{chunk.position}")),
                dense=vector.tolist(), sparse_indices=indices, sparse_values=values,
                payload={
                    "expert": expert.slug, "document_id": document.pk, "document_version": document.version,
                    "title": title, "document_title": document.title, "url": url, "source": source, "position": chunk.position,
                    "heading": chunk.heading, "text": chunk.text, **extra,
                },
            )
        )
    return points


def _sentence_payloads(texts: list[str], encoder: Any, batch_size: int) -> list[dict[str, str]]:
    """Each chunk's sentence vectors for its payload (``INDEX_SENTENCE_VECTORS``), in one encode for the document.

    The extractive generator answers from these sentences (``experts.ml.extractive``); with them in
    the payload, serving encodes only the question. Empty dicts when the setting is off.
    """
    if not settings.INDEX_SENTENCE_VECTORS:
        return [{} for _ in texts]
    from experts.ml.extractive import split_sentences

    split = [split_sentences(text) for text in texts]
    flat = [sentence for sentences in split for sentence in sentences]
    if not flat:
        return [{} for _ in texts]
    vectors = encoder.encode(flat, batch_size=batch_size)
    payloads, offset = [], 0
    for sentences in split:
        block = vectors[offset : offset + len(sentences)]
        offset += len(sentences)
        payloads.append({"sentence_model": encoder.name, "sentence_vectors": pack_vectors(block)} if sentences else {})
    return payloads
