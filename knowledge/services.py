"""Ingesting, indexing and searching experts' knowledge bases.

Long because ingestion, indexing and search share one knowledge base's rules: document versions,
the model a collection was built with, and its chunking.

Documents are versioned by the hash of their text: the same file again changes nothing, a changed
one becomes a new version that is indexed in one atomic swap of its chunks (``replace_documents``).
Until that swap succeeds the previous version's chunks keep serving; a version that fails to index
keeps its error on the row and stays pending.

Every collection records what it was built with (``KnowledgeBase``: embedding model, dimension,
chunking). Indexing into a collection built with another model re-embeds everything instead, since
vectors of two models cannot share one collection.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from experts.models import Expert
from experts.selectors import active_expert_slugs, active_experts, clear_serving_caches, experts_by_slug, serving_cached
from jobs.models import Job
from jobs.services import JobReporter, enqueue_once
from sbcommon import uploads
from sbcommon.encoders import embedding_space, get_encoder, tokenizer_words
from sbcommon.hashing import text_hash
from sbcommon.uploads import UploadRejected, check_size, safe_filename

from .ml import chunking, routed
from .ml import conversation as search_conversation
from .ml.chunking import Chunk, chunk_text, section_title
from .ml.conversation import SearchContext, expand_query
from .ml.distinct import DistinctWords
from .ml.routed import routing_weights
from .ml.sentences import pack_vectors, unpack_vectors
from .ml.sparse import bm25_vector
from .ml.spelling import Correction, Vocabulary
from .models import Document, KnowledgeBase
from .parsers import SNIFF_BYTES, DocumentInput, ParseError, parse_bytes, sniff
from .stores import Hit, PointRecord, VectorStore, get_store

logger = logging.getLogger(__name__)
POINT_NAMESPACE = uuid.UUID("6f1c1f6e-6c57-4d0c-9a55-9b1c2b3b6a11")
MAX_FILES_PER_UPLOAD = 100
CHUNK_SIZE_RANGE = (100, 8000)

# Re-exported: callers build documents through this module, and the evaluations plan routed searches with it.
__all__ = ["DocumentInput", "ParseError", "routing_weights"]


def collection_name(expert: Expert) -> str:
    """The expert's collection (an alias on a Qdrant server)."""
    return f"expert_{expert.slug}"


def max_upload_bytes() -> int:
    """The largest upload accepted (setting ``DOCUMENT_UPLOAD_MAX_BYTES``), all files of a request together."""
    return settings.DOCUMENT_UPLOAD_MAX_BYTES


def widen_below() -> float:
    """Router confidence under which routed search widens to every expert (``knowledge.ml.routed.WIDEN_BELOW``; 1.0: always)."""
    return routed.WIDEN_BELOW


# --- documents -----------------------------------------------------------------------------------

@transaction.atomic
def upsert_document(expert: Expert, doc: DocumentInput) -> tuple[Document, bool]:
    """Store a document version; returns (document, changed). Same content → nothing changes."""
    if not doc.text.strip():
        raise ValueError(f"document {doc.external_id!r} has no text")
    digest = text_hash(doc.text)
    title = doc.title[:500] or doc.external_id
    existing = Document.objects.select_for_update().filter(expert=expert, external_id=doc.external_id).first()
    if existing is not None and existing.content_hash == digest:
        return existing, False
    if existing is None:
        document = Document.objects.create(
            expert=expert, external_id=doc.external_id, title=title, url=doc.url, content_hash=digest, text=doc.text, metadata=doc.metadata or {},
        )
    else:
        # The new version waits for indexing; the old version's chunks serve until it is swapped in.
        existing.title, existing.url, existing.text = title, doc.url, doc.text
        existing.content_hash, existing.metadata = digest, doc.metadata or {}
        existing.version += 1
        existing.indexed_at = None
        existing.index_error = ""
        existing.save()
        document = existing
    return document, True


# --- chunks and points ---------------------------------------------------------------------------

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


def _points(expert: Expert, document: Document) -> list[PointRecord]:
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


def sentence_vector_reader(payload: dict[str, Any]) -> Callable[[], Any] | None:
    """Reads a chunk payload's sentence vectors (float32 rows) when called; None: absent, or made by
    another encoder than serving's. Decoding waits for the call: most retrieved chunks are cached already."""
    packed = payload.get("sentence_vectors")
    if not packed:
        return None
    encoder = get_encoder()
    if payload.get("sentence_model") != encoder.name:
        return None
    return functools.partial(unpack_vectors, packed, encoder.dimension)


def _record_model(expert: Expert, *, built: bool) -> KnowledgeBase:
    encoder = get_encoder()
    size, overlap = chunk_settings(expert)
    defaults: dict[str, Any] = {"embedding_model": embedding_space(), "dimension": encoder.dimension, "chunk_size": size, "chunk_overlap": overlap}
    if built:
        defaults["built_at"] = timezone.now()
    kb, _ = KnowledgeBase.objects.update_or_create(expert=expert, defaults=defaults)
    return kb


def model_mismatch(expert: Expert, kb: KnowledgeBase | None = None) -> str:
    """Why the expert's collection no longer fits the configured encoder ("" when it does)."""
    kb = kb if kb is not None else KnowledgeBase.objects.filter(expert=expert).first()
    if kb is None:
        return ""
    if kb.embedding_model != embedding_space():
        return f"built with {kb.embedding_model}, but the encoder now makes {embedding_space()} vectors (EMBEDDING_MODEL, EMBEDDING_BACKEND)"
    return ""


# --- indexing ------------------------------------------------------------------------------------

def index_documents(expert: Expert, documents: list[Document]) -> int:
    """(Re)index these documents' chunks in one atomic swap; returns the number of chunks.

    A document that cannot be chunked or embedded keeps its error and its previous chunks; the
    others are indexed. If the swap itself fails, nothing changes in the collection.
    """
    store = get_store()
    store.ensure_collection(collection_name(expert), get_encoder().dimension)
    batch: dict[int, list[PointRecord]] = {}
    for document in documents:
        try:
            batch[document.pk] = _points(expert, document)
        except (ValueError, RuntimeError) as exc:
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
    for document in documents:
        if document.pk in batch:
            # Only marks the version that was indexed: a newer upload stays pending.
            Document.objects.filter(pk=document.pk, content_hash=document.content_hash).update(chunk_count=len(batch[document.pk]), indexed_at=now, index_error="")
    return sum(len(points) for points in batch.values())


def _index_pending_documents(expert: Expert, reporter: JobReporter, batch_size: int, rounds: int = 5) -> dict[str, int]:
    done, chunks = 0, 0
    for _ in range(rounds):  # uploads that arrive while this runs are picked up by the next round
        pending = list(Document.objects.filter(expert=expert, indexed_at__isnull=True, index_error="").order_by("pk"))
        if not pending:
            break
        for start in range(0, len(pending), batch_size):
            part = pending[start : start + batch_size]
            chunks += index_documents(expert, part)
            done += len(part)
            reporter.progress((start + len(part)) / len(pending), f"indexed {start + len(part)}/{len(pending)} documents")
    return {"documents": done, "chunks": chunks}


def index_pending(expert: Expert, reporter: JobReporter | None = None, batch_size: int = 50) -> dict[str, Any]:
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
    embedded: dict[int, tuple[str, int]] = {}
    for i, document in enumerate(documents, start=1):
        try:
            doc_points = _points(expert, document)
        except (ValueError, RuntimeError) as exc:
            Document.objects.filter(pk=document.pk).update(index_error=f"rebuild stopped here, the previous collection keeps serving: {exc.__class__.__name__}: {exc}"[:2000])
            raise
        embedded[document.pk] = (document.content_hash, len(doc_points))
        points.extend(doc_points)
        reporter.progress(0.9 * i / max(1, len(documents)), f"embedded {i}/{len(documents)} documents")
    get_store().rebuild(collection_name(expert), get_encoder().dimension, points)
    _record_model(expert, built=True)
    now = timezone.now()
    stale = 0
    for pk, (digest, n) in embedded.items():
        if not Document.objects.filter(pk=pk, content_hash=digest).update(chunk_count=n, indexed_at=now, index_error=""):
            stale += 1
            Document.objects.filter(pk=pk).update(indexed_at=None)
    follow_up = _index_pending_documents(expert, reporter, 50) if stale else {"documents": 0}
    reporter.progress(1.0, f"{len(points)} chunks from {len(embedded)} documents")
    return {"documents": len(embedded), "chunks": len(points), "updated_after": follow_up["documents"]}


def delete_document(document: Document) -> None:
    """Remove a document and its chunks."""
    get_store().delete_document(collection_name(document.expert), document.pk)
    document.delete()


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


@transaction.atomic
def update_chunking(expert: Expert, size: int, overlap: int, user: Any = None) -> Job | None:
    """Change the expert's chunk size and overlap; a rebuild job re-chunks the collection (``None`` if nothing changed)."""
    if not CHUNK_SIZE_RANGE[0] <= size <= CHUNK_SIZE_RANGE[1]:
        raise ValueError(f"chunk size must be between {CHUNK_SIZE_RANGE[0]} and {CHUNK_SIZE_RANGE[1]} characters")
    if not 0 <= overlap < size // 2:
        raise ValueError("chunk overlap must be at least 0 and less than half the chunk size")
    if (expert.chunk_size, expert.chunk_overlap) == (size, overlap):
        return None
    Expert.objects.filter(pk=expert.pk).update(chunk_size=size, chunk_overlap=overlap)
    expert.chunk_size, expert.chunk_overlap = size, overlap
    if not Document.objects.filter(expert=expert).exists():
        return None
    return enqueue_rebuild(expert, user)


# --- jobs ----------------------------------------------------------------------------------------

def enqueue_index(expert: Expert, user: Any = None) -> Job:
    """Index the expert's pending documents (one active job per expert)."""
    from . import tasks

    return enqueue_once("index_documents", f"index:{expert.slug}", f"Index {expert.name} documents", tasks.index_expert_documents, {"expert": expert.slug}, user)


def enqueue_rebuild(expert: Expert, user: Any = None) -> Job:
    """Rebuild the expert's collection behind its alias/pointer (re-chunks and re-embeds everything)."""
    from . import tasks

    return enqueue_once("rebuild_index", f"rebuild:{expert.slug}", f"Rebuild {expert.name} knowledge base", tasks.rebuild_expert_index, {"expert": expert.slug}, user)


def enqueue_reembed_stale(user: Any = None) -> list[Job]:
    """A rebuild job for every expert whose collection was built with another embedding model."""
    return [enqueue_rebuild(kb.expert, user) for kb in KnowledgeBase.objects.select_related("expert").exclude(embedding_model=embedding_space())]


def enqueue_delete(document: Document, user: Any = None) -> Job:
    from . import tasks

    return enqueue_once(
        "delete_document", f"delete_document:{document.pk}", f"Delete {document.title[:200]}", tasks.delete_expert_document,
        {"expert": document.expert.slug, "document": document.pk}, user,
    )


def enqueue_drop(expert: Expert, user: Any = None) -> Job:
    from . import tasks

    return enqueue_once("drop_collection", f"drop:{expert.slug}", f"Drop {expert.name} collection", tasks.drop_expert_collection, {"expert": expert.slug}, user)


# --- uploads -------------------------------------------------------------------------------------

def _read_head(upload: Any) -> bytes:
    upload.seek(0)
    head = upload.read(SNIFF_BYTES)
    upload.seek(0)
    return head


def check_upload(upload: Any) -> str:
    """Refuse a file that is too large, empty or of a kind we cannot read, before storing it; returns its kind."""
    name = safe_filename(getattr(upload, "name", "") or "")
    check_size(int(getattr(upload, "size", 0) or 0), max_upload_bytes(), name)
    try:
        return sniff(_read_head(upload), name, complete=False)
    except ParseError as exc:
        raise UploadRejected(f"{name}: {exc}") from exc


def upload_dir() -> Path:
    return Path(settings.VAR_DIR) / "uploads" / "knowledge"


def save_upload(upload: Any) -> tuple[Path, str]:
    """Store an upload under ``VAR_DIR/uploads/knowledge/`` atomically; returns (path, SHA-256)."""
    return uploads.save_upload(upload, upload_dir(), default_name="document")


def accept_uploads(expert: Expert, uploads: list[Any], user: Any = None) -> Job:
    """Check every file, store them, and enqueue one ingest job; nothing is stored if any file is refused.

    The same files again give the same active job (the key is their hashes).

    Raises:
        UploadRejected: no files, too many, too large (413), empty, or of a kind we cannot read.
    """
    from . import tasks

    if not uploads:
        raise UploadRejected("choose at least one file")
    if len(uploads) > MAX_FILES_PER_UPLOAD:
        raise UploadRejected(f"{len(uploads)} files in one upload; the limit is {MAX_FILES_PER_UPLOAD}")
    total = sum(int(getattr(u, "size", 0) or 0) for u in uploads)
    if total > max_upload_bytes():
        raise UploadRejected(f"the files add up to {total:,} bytes; the limit is {max_upload_bytes():,} bytes", status=413)
    for upload in uploads:
        check_upload(upload)
    stored = [(*save_upload(u), safe_filename(u.name)) for u in uploads]
    key = hashlib.sha256("|".join(sorted(f"{name}:{digest}" for _, digest, name in stored)).encode()).hexdigest()[:32]
    names = ", ".join(name for _, _, name in stored)
    job = enqueue_once(
        "ingest_documents", f"ingest:{expert.slug}:{key}", f"Add {names[:180]} to {expert.name}"[:255], tasks.ingest_expert_documents,
        {"expert": expert.slug, "files": [{"path": str(p), "name": name, "sha256": digest} for p, digest, name in stored]}, user,
    )
    if [f["path"] for f in job.params.get("files", [])] != [str(p) for p, _, _ in stored]:
        for path, _, _ in stored:  # the same files are already being ingested
            path.unlink(missing_ok=True)
    return job


@dataclass
class IngestReport:
    """What an ingest did, file by file, and what indexing did after it."""

    files: list[dict[str, Any]] = field(default_factory=list)
    indexing: dict[str, Any] = field(default_factory=dict)

    @property
    def created(self) -> int:
        return sum(f.get("created", 0) for f in self.files)

    @property
    def updated(self) -> int:
        return sum(f.get("updated", 0) for f in self.files)

    @property
    def unchanged(self) -> int:
        return sum(f.get("unchanged", 0) for f in self.files)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [f for f in self.files if f.get("error")]

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": self.files, "created": self.created, "updated": self.updated, "unchanged": self.unchanged,
            "failed_files": len(self.failed), "indexing": self.indexing,
        }


def ingest_file(expert: Expert, name: str, data: bytes, external_id: str | None = None) -> dict[str, Any]:
    """Parse one file and store its documents; returns the file's line of the report (never raises ``ParseError``)."""
    name = safe_filename(name)
    outcome: dict[str, Any] = {"file": name, "created": 0, "updated": 0, "unchanged": 0, "documents": []}
    try:
        parsed = parse_bytes(data, name, external_id=external_id)
    except ParseError as exc:
        outcome["error"] = str(exc)
        return outcome
    outcome["kind"] = parsed.kind
    if parsed.errors:
        outcome["skipped_lines"] = parsed.errors[:50]
    for doc in parsed.documents:
        existing_version = Document.objects.filter(expert=expert, external_id=doc.external_id).values_list("version", flat=True).first()
        document, changed = upsert_document(expert, doc)
        state = "unchanged" if not changed else ("created" if existing_version is None else "updated")
        outcome[state] += 1
        outcome["documents"].append({"id": document.pk, "title": document.title, "version": document.version, "state": state})
    return outcome


def ingest_files(expert: Expert, files: Iterable[tuple[str, bytes | Path]], reporter: JobReporter | None = None, index: bool = True) -> IngestReport:
    """Parse and store each (name, bytes or path), then index what changed.

    A file that cannot be parsed is reported and skipped; the others go on. Indexing happens once,
    after all files, in batches (see ``index_pending``).
    """
    reporter = reporter or JobReporter()
    files = list(files)
    report = IngestReport()
    for i, (name, source) in enumerate(files, start=1):
        data = Path(source).read_bytes() if isinstance(source, Path) else source
        outcome = ingest_file(expert, name, data)
        report.files.append(outcome)
        if outcome.get("error"):
            reporter.log(f"{outcome['file']}: {outcome['error']}")
        reporter.progress(0.3 * i / len(files), f"read {i}/{len(files)} files")
    if index and (report.created or report.updated or Document.objects.filter(expert=expert, indexed_at__isnull=True).exists()):
        report.indexing = index_pending(expert, _Scaled(reporter, 0.3, 1.0))
    return report


class _Scaled(JobReporter):
    """Passes progress on to ``inner`` mapped into [start, end] (ingest reads files first, then indexes)."""

    def __init__(self, inner: JobReporter, start: float, end: float):
        super().__init__(inner.job_id)
        self.inner, self.start, self.end = inner, start, end

    def progress(self, fraction: float, message: str = "") -> None:
        self.inner.progress(self.start + (self.end - self.start) * fraction, message)

    def log(self, line: str) -> None:
        self.inner.log(line)


def walk_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files named by ``paths``, folders walked in name order (hidden files skipped)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend(p for p in sorted(path.rglob("*")) if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
        else:
            out.append(path)
    return out


# --- search --------------------------------------------------------------------------------------

def _query(question: str, query_vector: list[float] | None) -> tuple[list[float], list[int], list[float]]:
    dense = query_vector if query_vector is not None else get_encoder().encode([question])[0].tolist()
    indices, values = bm25_vector(question, query=True)
    return dense, indices, values


def _method_for(expert_models: dict[int, str], experts: list[Expert], method: str) -> str:
    """Dense vectors of another model mean nothing: if any collection has them, fall back to keyword search."""
    space = embedding_space()
    if method != "sparse" and any(expert_models.get(e.pk, space) != space for e in experts):
        logger.warning("knowledge.search.model_mismatch", extra={"experts": [e.slug for e in experts]})
        return "sparse"
    return method


def _models(experts: list[Expert]) -> dict[int, str]:
    """The embedding model of each expert's knowledge base (read once per SERVING_CACHE_TTL_S, not per search)."""
    every = serving_cached("knowledge-base-models", lambda: dict(KnowledgeBase.objects.values_list("expert_id", "embedding_model")))
    return {e.pk: every[e.pk] for e in experts if e.pk in every}


post_save.connect(clear_serving_caches, sender=KnowledgeBase, dispatch_uid="serving-cache-save-KnowledgeBase")
post_delete.connect(clear_serving_caches, sender=KnowledgeBase, dispatch_uid="serving-cache-delete-KnowledgeBase")


def search_expert(expert: Expert, question: str, limit: int = 5, query_vector: list[float] | None = None, method: str = "hybrid") -> list[Hit]:
    """Search one expert's collection: "hybrid" (dense + sparse, RRF-fused), "dense" or "sparse"."""
    dense, indices, values = _query(question, query_vector)
    method = _method_for(_models([expert]), [expert], method)
    return get_store().search(collection_name(expert), dense, indices, values, limit=limit, method=method)


def context_weight() -> float:
    """How much a conversation's earlier user turns count in its follow-up's search (``knowledge.ml.conversation.CONTEXT_WEIGHT``)."""
    return search_conversation.CONTEXT_WEIGHT


def weight_power(widened: bool = False) -> float:
    """How much the router's probabilities weigh in routed search (``knowledge.ml.routed``): ``WEIGHT_POWER`` for a
    question searched alone, ``CONTEXT_WEIGHT_POWER`` for one ``widened`` with its conversation's earlier turns."""
    return routed.CONTEXT_WEIGHT_POWER if widened else routed.WEIGHT_POWER


def widens(context: SearchContext | None) -> bool:
    """Whether a search with ``context`` reads the conversation's earlier turns (``expand_query`` widens its query)."""
    return context is not None and not context.empty


def search_collections(store: VectorStore, weights: dict[str, float], dense: list[float], indices: list[int], values: list[float],
                       limit: int = 5, method: str = "hybrid") -> list[Hit]:
    """One search over the weighted collections (see ``VectorStore.search_many``)."""
    names = list(weights)
    if len(names) == 1:
        return store.search(names[0], dense, indices, values, limit=limit, method=method)
    return store.search_many(names, dense, indices, values, limit=limit, method=method, weights=[weights[n] for n in names])


def search_experts(experts: list[Expert], question: str, limit: int = 5, weights: list[float] | None = None, query_vector: list[float] | None = None,
                   *, method: str = "hybrid", flat: bool = False, allowed: set[str] | None = None, context: SearchContext | None = None) -> list[Hit]:
    """Search the chosen experts' collections as one, each weighted by the router's confidence in it.

    Scores are made comparable across collections by ranking every candidate globally (dense
    cosines over all collections, BM25 with IDF over all of them) before fusing, instead of fusing
    each collection's own ranks (every collection has a rank 1). A chunk's score is then its RRF
    score times its expert's weight: the router's probability that the answer lives there. When
    the chosen experts' probabilities add up to less than ``widen_below()`` the other
    active experts are searched too with the probability left over, so an unsure router degrades
    to the flat search instead of losing the answer.

    Args:
        experts: the chosen experts, best first.
        question: the user's question (its words feed the sparse search).
        limit: chunks to return.
        weights: the router's probability for each chosen expert; None treats them alike.
        query_vector: the question's embedding if the caller has it already.
        method: "hybrid", "dense" or "sparse".
        flat: ignore the routing and search every active expert's collection as one (for comparison).
        allowed: the only expert slugs the caller may read (an API key's scope): widening never
            reaches past them. None: every active expert.
        context: the user's earlier turns (``knowledge.ml.conversation``): the query is widened with them.
    """
    if flat:
        experts, weights = list(active_experts()), None
    if not experts:
        return []
    dense, indices, values = _query(question, query_vector)
    searched, indices, values = expand_query(dense, indices, values, context)
    names = {collection_name(e): e for e in experts}
    others: list[Expert] = []
    if weights is not None and sum(max(0.0, w) for w in weights) < widen_below():
        # The serving caches' copy of the active experts (ordered by slug): no query per routed request.
        candidates = experts_by_slug(active_expert_slugs()).values()
        others = [e for e in candidates if collection_name(e) not in names and (allowed is None or e.slug in allowed)]
    plan = routing_weights(list(names), weights, [collection_name(e) for e in others], widen_below(), power=weight_power(widens(context)))
    everyone = list(experts) + others
    method = _method_for(_models(everyone), everyone, method)
    return search_collections(get_store(), plan, searched, indices, values, limit=limit, method=method)


# --- routing evidence ----------------------------------------------------------------------------

EvidenceLookup = Callable[[list[int], Any, str], list["tuple[float, float] | None"]]


def evidence_lookup(slugs: list[str]) -> EvidenceLookup:
    """A lookup for knowledge-aware routing (``routing.ml.knowledge``) over the experts ``slugs``, by position.

    ``lookup(positions, question vector, question)`` returns, for each expert at those positions,
    (the best dense cosine of the question in its collection, the best BM25 score of its words),
    or None where the expert does not exist, has no indexed chunk, or its collection was embedded
    by another model (its cosines would mean nothing). ``StoreUnavailable`` propagates: the caller
    routes without the evidence.
    """
    rows = experts_by_slug(slugs)
    models = _models(list(rows.values()))
    space = embedding_space()
    names = [
        collection_name(rows[s]) if s in rows and models.get(rows[s].pk, space) == space else None
        for s in slugs
    ]
    return collection_lookup(get_store, names)


def collection_lookup(store: Callable[[], VectorStore], names: list[str | None]) -> EvidenceLookup:
    """``evidence_lookup`` over the collections ``names`` by position (None: no collection to ask) in ``store()``'s store."""

    def lookup(positions: list[int], vector: Any, question: str) -> list[tuple[float, float] | None]:
        wanted = [names[j] for j in positions if names[j]]
        if not wanted:
            return [None] * len(positions)
        indices, values = bm25_vector(question, query=True)
        found = store().evidence(wanted, np.asarray(vector, dtype=np.float32), indices, values)
        return [found.get(names[j]) if names[j] else None for j in positions]

    return lookup


def experts_without_documents(slugs: list[str]) -> list[str]:
    """Those of ``slugs`` whose collection holds no chunk (or that do not exist)."""
    rows = experts_by_slug(slugs)
    store = get_store()
    return [s for s in slugs if s not in rows or not store.count(collection_name(rows[s]))]


# --- spelling ------------------------------------------------------------------------------------

_vocabularies: dict[tuple[Any, ...], Vocabulary] = {}
_vocabularies_lock = threading.Lock()
VOCABULARY_CACHE = 64


def _vocabulary_key(expert: Expert) -> tuple[Any, ...]:
    """What an expert's vocabulary depends on: its documents' count and latest change (read once per SERVING_CACHE_TTL_S)."""
    def load() -> tuple[Any, ...]:
        stats = Document.objects.filter(expert_id=expert.pk).aggregate(n=Count("id"), last=Max("updated_at"))
        return (expert.pk, stats["n"], stats["last"].isoformat() if stats["last"] else "")

    return serving_cached(("vocabulary-key", expert.pk), load)


def _built_once(cache: dict[tuple[Any, ...], Any], keys: tuple[Any, ...], build: Callable[[], Any]) -> Any:
    """``cache[keys]``, built by ``build()`` the first time (keys: ``_vocabulary_key``s); the oldest of ``VOCABULARY_CACHE`` entries goes first."""
    with _vocabularies_lock:
        found = cache.get(keys)
    if found is not None:
        return found
    built = build()
    with _vocabularies_lock:
        if len(cache) >= VOCABULARY_CACHE:
            cache.pop(next(iter(cache)))
        cache[keys] = built
    return built


def _document_texts(expert_ids: list[int]) -> Iterable[str]:
    """The title and text of each document of the experts ``expert_ids``, read in batches."""
    rows = Document.objects.filter(expert_id__in=expert_ids).values_list("title", "text").iterator(chunk_size=200)
    return (f"{title}\n{text}" for title, text in rows)


def vocabulary(experts: list[Expert]) -> Vocabulary:
    """The words of the experts' documents (titles and texts) with their counts, built once per change of their documents."""
    keys = tuple(sorted(_vocabulary_key(e) for e in experts))
    return _built_once(_vocabularies, keys, lambda: Vocabulary.from_texts(_document_texts([e.pk for e in experts])))


_distinct: dict[tuple[Any, ...], DistinctWords] = {}


def distinct_words(slugs: list[str]) -> DistinctWords:
    """``knowledge.ml.distinct.DistinctWords`` over the documents of the experts ``slugs``, by position
    (an expert that does not exist counts as one without documents); built once per change of their documents."""
    rows = experts_by_slug(slugs)
    keys = tuple(_vocabulary_key(rows[s]) if s in rows else (s,) for s in slugs)
    return _built_once(_distinct, keys, lambda: DistinctWords.from_texts(
        (_document_texts([rows[s].pk]) if s in rows else [] for s in slugs), tokenizer_words(settings.EMBEDDING_MODEL)))


def correct_spelling(experts: list[Expert], question: str) -> Correction:
    """``question`` with its unknown words replaced by the closest words of the experts' documents (``knowledge.ml.spelling``).

    Off (the question as written) with ``RETRIEVAL_SPELLING`` false or without experts.
    """
    if not settings.RETRIEVAL_SPELLING or not experts:
        return Correction(question)
    return vocabulary(experts).correct(question, tokenizer_words(settings.EMBEDDING_MODEL))
