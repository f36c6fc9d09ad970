"""Indexing an expert's documents into its collection: pending versions, rebuilds, deletions.

A new document version is indexed in one atomic swap of its chunks (``VectorStore.replace_documents``).
Until that swap succeeds the previous version's chunks keep serving; a version that fails to index
keeps its error on the row and stays pending. Once every chunk of a job is searchable, the job adds
each chunk's sentence vectors to its payload (``points.sentence_payloads``, ``VectorStore.set_payloads``):
the extractive answer reads them instead of encoding a chunk's sentences when it first answers from it.

Every collection records what it was built with (``KnowledgeBase``: embedding model, dimension,
chunking). Indexing into a collection built with another model re-embeds everything instead, since
vectors of two models cannot share one collection.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import transaction
from django.utils import timezone

from encoders import embedding_space, get_encoder
from experts.ml.extractive import set_aside_share
from experts.models import Expert
from jobs.services import JobReporter

from .models import Document, KnowledgeBase
from .points import chunk_settings, documents_points, sentence_payloads
from .selectors import collection_name, model_mismatch
from .stores import PointRecord, get_store

logger = logging.getLogger(__name__)

# Documents embedded together and swapped into the collection in one write (each write copies the collection's
# version, so fewer, larger batches write less; the encoder's passes dominate either way).
INDEX_BATCH = 50
# The share of an indexing job's progress bar that ends when its chunks are searchable; the sentence vectors
# fill the rest (doc2dial: searchable at 41 of 70 s, docs/EVALUATIONS.md#bench-ingest).
SEARCHABLE_PROGRESS = 0.6
# Chunks whose sentence vectors are written together, at most (each write copies the collection). A memory
# bound, not a tuned figure: their payloads take ~3.3 KB a chunk (3.2 sentences of 384 float16 numbers, base64).
SENTENCE_WRITE_CHUNKS = 5000


def _record_model(expert: Expert, *, built: bool) -> KnowledgeBase:
    encoder = get_encoder()
    size, overlap = chunk_settings(expert)
    defaults: dict[str, Any] = {"embedding_model": embedding_space(), "dimension": encoder.dimension, "chunk_size": size, "chunk_overlap": overlap}
    if built:
        defaults["built_at"] = timezone.now()
    kb, _ = KnowledgeBase.objects.update_or_create(expert=expert, defaults=defaults)
    return kb


def _points(expert: Expert, documents: list[Document], seconds: dict[str, float]) -> tuple[dict[int, list[PointRecord]], dict[int, Exception]]:
    """(points, errors) of each document: embedded together, or, when that fails, one by one to tell the documents that cannot be indexed."""
    try:
        return documents_points(expert, documents, seconds), {}
    except (ValueError, RuntimeError) as exc:
        if len(documents) == 1:
            return {}, {documents[0].pk: exc}
    points: dict[int, list[PointRecord]] = {}
    errors: dict[int, Exception] = {}
    for document in documents:
        try:
            points.update(documents_points(expert, [document], seconds))
        except (ValueError, RuntimeError) as exc:
            errors[document.pk] = exc
    return points, errors


def _set_aside(points: list[PointRecord]) -> float:
    """The share of a document's indexed text no answer quotes (``extractive.set_aside_share`` over its chunks)."""
    return set_aside_share([str(p.payload.get("text") or "") for p in points])


def _add_seconds(seconds: dict[str, float], phase: str, started: float) -> None:
    seconds[phase] = seconds.get(phase, 0.0) + time.perf_counter() - started


def add_sentence_vectors(expert: Expert, chunks: dict[str, str], seconds: dict[str, float] | None = None) -> int:
    """Add their sentence vectors to the payloads of ``chunks`` (point id -> chunk text) in the expert's collection, in one
    write; a chunk replaced or deleted since is skipped. Returns the number of chunks given vectors. ``seconds`` (when given)
    gains the time spent encoding ("sentences") and writing ("write")."""
    payloads = sentence_payloads(chunks, seconds)
    if payloads:
        started = time.perf_counter()
        get_store().set_payloads(collection_name(expert), payloads)
        _add_seconds(seconds if seconds is not None else {}, "write", started)
    return len(payloads)


def _add_sentences(expert: Expert, written: list[dict[str, str]], reporter: JobReporter, seconds: dict[str, float]) -> float:
    """The sentence vectors of every chunk a job wrote (``written``: point id -> text, one dict per write), written
    ``SENTENCE_WRITE_CHUNKS`` chunks at a time at most; returns the CPU seconds it took."""
    cpu, total, done = time.process_time(), sum(len(chunks) for chunks in written), 0
    group: dict[str, str] = {}
    for i, chunks in enumerate(written):
        group.update(chunks)
        if len(group) >= SENTENCE_WRITE_CHUNKS or i == len(written) - 1:
            add_sentence_vectors(expert, group, seconds)
            done, group = done + len(group), {}
            reporter.progress(SEARCHABLE_PROGRESS + (1 - SEARCHABLE_PROGRESS) * done / max(1, total), f"sentence vectors for answers: {done}/{total} chunks")
    return time.process_time() - cpu


def index_documents(expert: Expert, documents: list[Document], seconds: dict[str, float] | None = None, written: list[dict[str, str]] | None = None) -> int:
    """(Re)index these documents' chunks in one atomic swap; returns the number of chunks.

    A document that cannot be chunked or embedded keeps its error and its previous chunks; the
    others are indexed. If the swap itself fails, nothing changes in the collection. ``seconds``
    (when given) gains the time spent chunking, embedding and writing ("chunk", "embed", "write");
    ``written`` (when given) gains the chunks written (point id -> text), whose sentence vectors the
    caller adds (``add_sentence_vectors``).
    """
    seconds = {} if seconds is None else seconds
    store = get_store()
    store.ensure_collection(collection_name(expert), get_encoder().dimension)
    batch, errors = _points(expert, documents, seconds)
    started = time.perf_counter()
    for document in documents:
        if document.pk in errors:
            exc = errors[document.pk]
            logger.warning("knowledge.index.document_failed", extra={"document": document.pk})
            Document.objects.filter(pk=document.pk, content_hash=document.content_hash).update(index_error=f"{exc.__class__.__name__}: {exc}"[:2000])
    if not batch:
        return 0
    try:
        store.replace_documents(collection_name(expert), batch)
    except Exception as exc:
        Document.objects.filter(pk__in=list(batch)).update(index_error=f"indexing failed, the previous version keeps serving: {exc.__class__.__name__}: {exc}"[:2000])
        raise
    now = timezone.now()
    with transaction.atomic():
        for document in documents:
            if document.pk in batch:
                # Only marks the version that was indexed: a newer upload stays pending.
                Document.objects.filter(pk=document.pk, content_hash=document.content_hash).update(
                    chunk_count=len(batch[document.pk]), set_aside=_set_aside(batch[document.pk]), indexed_at=now, index_error="")
    _add_seconds(seconds, "write", started)
    if written is not None:
        written.append({p.id: str(p.payload.get("text") or "") for points in batch.values() for p in points})
    return sum(len(points) for points in batch.values())


def _index_pending_documents(expert: Expert, reporter: JobReporter, batch_size: int, rounds: int = 5) -> dict[str, Any]:
    """Index the pending documents: every chunk searchable first, then their sentence vectors added (``_add_sentences``).
    The result's ``seconds`` hold each phase's; ``sentences_s`` and ``sentences_cpu_s`` are the job's tail after its chunks
    were searchable (wall and CPU seconds)."""
    done, chunks, seconds = 0, 0, {}
    written: list[dict[str, str]] = []
    for _ in range(rounds):  # uploads that arrive while this runs are picked up by the next round
        pending = list(Document.objects.filter(expert=expert, indexed_at__isnull=True, index_error="").order_by("pk"))
        if not pending:
            break
        for start in range(0, len(pending), batch_size):
            part = pending[start : start + batch_size]
            chunks += index_documents(expert, part, seconds, written)
            done += len(part)
            reporter.progress(SEARCHABLE_PROGRESS * (start + len(part)) / len(pending), f"indexed {start + len(part)}/{len(pending)} documents")
    started = time.perf_counter()
    cpu = _add_sentences(expert, written, reporter, seconds)
    return {"documents": done, "chunks": chunks, "seconds": {phase: round(s, 2) for phase, s in seconds.items()},
            "sentences_s": round(time.perf_counter() - started, 2), "sentences_cpu_s": round(cpu, 2)}


def index_pending(expert: Expert, reporter: JobReporter | None = None, batch_size: int = INDEX_BATCH) -> dict[str, Any]:
    """Index every document of ``expert`` not indexed at its current version (resumable, in batches).

    Failed documents are tried again (their error is cleared first). A collection built with
    another embedding model is rebuilt instead.
    """
    reporter = reporter or JobReporter()
    kb = KnowledgeBase.objects.filter(expert=expert).first()
    mismatch = model_mismatch(expert, kb)
    if mismatch:
        reporter.log(f"the collection was {mismatch}: re-embedding every document")
        return {**rebuild_index(expert, reporter), "reembedded": True}
    Document.objects.filter(expert=expert, indexed_at__isnull=True).exclude(index_error="").update(index_error="")
    if kb is None:
        get_store().ensure_collection(collection_name(expert), get_encoder().dimension)
        _record_model(expert, built=False)
    return _index_pending_documents(expert, reporter, batch_size)


def rebuild_index(expert: Expert, reporter: JobReporter | None = None) -> dict[str, Any]:
    """Re-chunk and re-embed every document into a fresh collection, then switch to it in one step.

    The old collection serves until the switch. If any document cannot be chunked or embedded,
    the rebuild stops before the switch (the error is kept on that document), so a rebuild never
    serves a collection with documents missing. Documents changed while the rebuild ran are
    indexed right after it, so the collection ends up at every document's latest version.
    """
    reporter = reporter or JobReporter()
    documents = list(Document.objects.filter(expert=expert).order_by("pk"))
    points: list[PointRecord] = []
    embedded: dict[int, tuple[str, int, float]] = {}
    seconds: dict[str, float] = {}
    written: list[dict[str, str]] = []
    for start in range(0, len(documents), INDEX_BATCH):
        part = documents[start : start + INDEX_BATCH]
        batch, errors = _points(expert, part, seconds)
        if errors:
            pk, exc = next(iter(errors.items()))
            Document.objects.filter(pk=pk).update(index_error=f"rebuild stopped here, the previous collection keeps serving: {exc.__class__.__name__}: {exc}"[:2000])
            raise exc
        for document in part:
            embedded[document.pk] = (document.content_hash, len(batch[document.pk]), _set_aside(batch[document.pk]))
            points.extend(batch[document.pk])
        written.append({p.id: str(p.payload.get("text") or "") for document in part for p in batch[document.pk]})
        reporter.progress(0.9 * SEARCHABLE_PROGRESS * (start + len(part)) / max(1, len(documents)), f"embedded {start + len(part)}/{len(documents)} documents")
    started = time.perf_counter()
    get_store().rebuild(collection_name(expert), get_encoder().dimension, points)
    _add_seconds(seconds, "write", started)
    _record_model(expert, built=True)
    now = timezone.now()
    stale = 0
    for pk, (digest, n, aside) in embedded.items():
        if not Document.objects.filter(pk=pk, content_hash=digest).update(chunk_count=n, set_aside=aside, indexed_at=now, index_error=""):
            stale += 1
            Document.objects.filter(pk=pk).update(indexed_at=None)
    del points  # written holds what the sentence vectors need
    follow_up = _index_pending_documents(expert, reporter, INDEX_BATCH) if stale else {"documents": 0}
    _add_sentences(expert, written, reporter, seconds)  # chunks the follow-up replaced are skipped
    reporter.progress(1.0, f"{sum(len(w) for w in written)} chunks from {len(embedded)} documents")
    return {"documents": len(embedded), "chunks": sum(len(w) for w in written), "updated_after": follow_up["documents"],
            "seconds": {phase: round(s, 2) for phase, s in seconds.items()}}


def delete_document_by_id(expert: Expert, document_id: int) -> dict[str, Any]:
    """Delete a document and its chunks; running it again finds nothing left and changes nothing."""
    get_store().delete_document(collection_name(expert), document_id)
    deleted, _ = Document.objects.filter(pk=document_id, expert=expert).delete()
    return {"document": document_id, "deleted": bool(deleted)}


def drop_collection(expert: Expert) -> dict[str, Any]:
    """Drop the expert's collection; its documents stay, pending, until the next index job rebuilds it."""
    store = get_store()
    chunks = store.count(collection_name(expert))
    store.drop(collection_name(expert))
    KnowledgeBase.objects.filter(expert=expert).delete()
    pending = Document.objects.filter(expert=expert).update(indexed_at=None, chunk_count=0, index_error="")
    return {"dropped_chunks": chunks, "documents_pending": pending}
