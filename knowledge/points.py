"""What a document becomes in its expert's collection: chunks, each with its title, as points with vectors and payloads.

``knowledge.indexing`` writes these points; the evaluations embed chunks the same way (``embedding_text``,
``sparse_text``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np
from django.conf import settings

from encoders import bulk_threads, get_encoder
from encoders.batching import MicroBatchingEncoder
from experts.models import Expert

from .ml import chunking
from .ml.chunking import Chunk, chunk_text, section_title
from .ml.sentences import pack_vectors
from .ml.sparse import bm25_vector, sparse_text
from .models import Document
from .stores import PointRecord

POINT_NAMESPACE = uuid.UUID("6f1c1f6e-6c57-4d0c-9a55-9b1c2b3b6a11")
CHUNK_SIZE_RANGE = (100, 8000)


def chunk_settings(expert: Expert) -> tuple[int, int]:
    """(size, overlap) for ``expert``, the overlap clamped below half the size as the chunker requires."""
    size = max(CHUNK_SIZE_RANGE[0], int(expert.chunk_size))
    return size, max(0, min(int(expert.chunk_overlap), size // 2 - 1))


def chunk_document(title: str, text: str, size: int, overlap: int) -> list[tuple[Chunk, str]]:
    """A document's chunks, each with its title: "Document — Section" when chunking by sections
    (``knowledge.ml.chunking.CHUNK_BY_SECTIONS``), else the document's.

    The title is what the chunk's embedding and BM25 terms start with and what its citation shows.
    """
    sections = chunking.CHUNK_BY_SECTIONS
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


def documents_points(expert: Expert, documents: list[Document], seconds: dict[str, float] | None = None) -> dict[int, list[PointRecord]]:
    """Each document's chunks as points, the documents embedded together: their chunks in one pass of the encoder
    (a document's vectors do not depend on its company).

    The payload's ``title`` is the chunk's citation title ("Document — Section"), ``document_title`` the
    document's; ``url`` the page it came from and ``source`` its ``metadata.source`` (where the document
    came from, when it has no page address). The chunks' sentence vectors are not made here: indexing adds
    them to the payloads once the points are searchable (``sentence_payloads``). ``seconds`` (when given)
    gains the time spent chunking ("chunk") and embedding ("embed").
    """
    started = time.perf_counter()
    size, overlap = chunk_settings(expert)
    chunked = [(document, chunk, title) for document in documents for chunk, title in chunk_document(document.title, document.text, size, overlap)]
    chunked_at = time.perf_counter()
    vectors = _encode(get_encoder(threads=bulk_threads()), [embedding_text(title, chunk.text) for _, chunk, title in chunked])
    if seconds is not None:
        seconds["chunk"] = seconds.get("chunk", 0.0) + chunked_at - started
        seconds["embed"] = seconds.get("embed", 0.0) + time.perf_counter() - chunked_at
    points: dict[int, list[PointRecord]] = {document.pk: [] for document in documents}
    for (document, chunk, title), vector in zip(chunked, vectors, strict=True):
        indices, values = bm25_vector(sparse_text(title, chunk.text))
        points[document.pk].append(
            PointRecord(
                id=str(uuid.uuid5(POINT_NAMESPACE, f"{document.pk}:{document.content_hash}:{chunk.position}")),
                dense=vector.tolist(), sparse_indices=indices, sparse_values=values,
                payload={
                    "expert": expert.slug, "document_id": document.pk, "document_version": document.version,
                    "title": title, "document_title": document.title, "url": document_url(document),
                    "source": str((document.metadata or {}).get("source") or "")[:500], "position": chunk.position,
                    "heading": chunk.heading, "text": chunk.text,
                },
            )
        )
    return points


def _encode(encoder: Any, texts: list[str]) -> np.ndarray:
    """``texts``' vectors, in calls small enough for the encoder's cache to keep them (``MicroBatchingEncoder.BULK_TEXTS``):
    the flat expert, a rebuild and serving's answers meet the same chunks and sentences again."""
    if not texts:
        return np.zeros((0, encoder.dimension), dtype=np.float32)
    step = MicroBatchingEncoder.BULK_TEXTS
    return np.concatenate([encoder.encode(texts[i : i + step], batch_size=settings.EMBEDDING_BATCH_SIZE) for i in range(0, len(texts), step)])


def sentence_payloads(chunks: dict[str, str], seconds: dict[str, float] | None = None) -> dict[str, dict[str, str]]:
    """What each chunk's payload gains for the extractive answer, by point id: its sentences' vectors
    (``INDEX_SENTENCE_VECTORS``), each distinct sentence of ``chunks`` (point id -> chunk text) encoded once.

    The extractive generator answers from these sentences (``experts.ml.extractive``); with them in the
    payload, serving encodes only the question, and without them it encodes a chunk's sentences the first
    time it answers from it. Chunks without sentences are left out; nothing when the setting is off.
    ``seconds`` (when given) gains the time spent ("sentences").
    """
    if not settings.INDEX_SENTENCE_VECTORS or not chunks:
        return {}
    from experts.ml.extractive import split_sentences

    started = time.perf_counter()
    encoder = get_encoder(threads=bulk_threads())
    split = {point: sentences for point, text in chunks.items() if (sentences := split_sentences(text))}
    distinct = list(dict.fromkeys(sentence for sentences in split.values() for sentence in sentences))  # overlapping chunks share sentences
    row = {sentence: i for i, sentence in enumerate(distinct)}
    vectors = _encode(encoder, distinct)
    payloads = {point: {"sentence_model": encoder.name, "sentence_vectors": pack_vectors(vectors[[row[s] for s in sentences]])}
                for point, sentences in split.items()}
    if seconds is not None:
        seconds["sentences"] = seconds.get("sentences", 0.0) + time.perf_counter() - started
    return payloads
