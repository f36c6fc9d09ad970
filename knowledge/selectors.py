"""Reads of knowledge-base state: each expert's collection, what it was built with, its documents and jobs."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.signals import post_delete, post_save

from encoders import embedding_space
from experts.models import Expert
from experts.selectors import clear_serving_caches, serving_cached
from jobs.models import Job

from .models import Document, KnowledgeBase

JOB_KINDS = ("ingest_documents", "index_documents", "rebuild_index", "delete_document", "drop_collection")


def collection_name(expert: Expert) -> str:
    """The expert's collection (an alias on a Qdrant server)."""
    return f"expert_{expert.slug}"


def collection_models(experts: list[Expert]) -> dict[int, str]:
    """The embedding model of each expert's knowledge base (read once per SERVING_CACHE_TTL_S, not per search)."""
    every = serving_cached("knowledge-base-models", lambda: dict(KnowledgeBase.objects.values_list("expert_id", "embedding_model")))
    return {e.pk: every[e.pk] for e in experts if e.pk in every}


post_save.connect(clear_serving_caches, sender=KnowledgeBase, dispatch_uid="serving-cache-save-KnowledgeBase")
post_delete.connect(clear_serving_caches, sender=KnowledgeBase, dispatch_uid="serving-cache-delete-KnowledgeBase")


def model_mismatch(expert: Expert, kb: KnowledgeBase | None = None) -> str:
    """Why the expert's collection no longer fits the configured encoder ("" when it does)."""
    kb = kb if kb is not None else KnowledgeBase.objects.filter(expert=expert).first()
    if kb is None:
        return ""
    if kb.embedding_model != embedding_space():
        return f"built with {kb.embedding_model}, but the encoder now makes {embedding_space()} vectors (EMBEDDING_MODEL, EMBEDDING_BACKEND)"
    return ""


def document_counts() -> dict[int, dict[str, int]]:
    """Per expert id: number of documents and chunks."""
    rows = Document.objects.values("expert_id").annotate(documents=Count("id"), chunks=Sum("chunk_count"))
    return {r["expert_id"]: {"documents": r["documents"], "chunks": r["chunks"] or 0} for r in rows}


def documents(expert: Expert) -> QuerySet[Document]:
    """The expert's documents, by title, without their text."""
    return Document.objects.filter(expert=expert).defer("text").order_by("title", "pk")


@dataclass
class KnowledgeSummary:
    """One expert's knowledge base at a glance, for the console."""

    expert: Expert
    documents: int
    chunks: int
    pending: int
    failed: int
    knowledge_base: KnowledgeBase | None

    @property
    def model_mismatch(self) -> bool:
        return self.knowledge_base is not None and self.knowledge_base.embedding_model != embedding_space()

    @property
    def chunking_changed(self) -> bool:
        kb = self.knowledge_base
        return kb is not None and (kb.chunk_size, kb.chunk_overlap) != (self.expert.chunk_size, self.expert.chunk_overlap)


def summaries() -> list[KnowledgeSummary]:
    """Every expert with its document, chunk, pending and failed counts."""
    kbs = {kb.expert_id: kb for kb in KnowledgeBase.objects.all()}
    experts = Expert.objects.annotate(
        n_documents=Count("documents"), n_chunks=Sum("documents__chunk_count"),
        n_pending=Count("documents", filter=Q(documents__indexed_at__isnull=True, documents__index_error="")),
        n_failed=Count("documents", filter=~Q(documents__index_error="")),
    ).order_by("name")
    return [KnowledgeSummary(e, e.n_documents, e.n_chunks or 0, e.n_pending, e.n_failed, kbs.get(e.pk)) for e in experts]


def summary(expert: Expert) -> KnowledgeSummary:
    docs = Document.objects.filter(expert=expert)
    return KnowledgeSummary(
        expert, docs.count(), docs.aggregate(n=Sum("chunk_count"))["n"] or 0, docs.filter(indexed_at__isnull=True, index_error="").count(),
        docs.exclude(index_error="").count(), KnowledgeBase.objects.filter(expert=expert).first(),
    )


def expert_jobs(expert: Expert, limit: int = 8) -> QuerySet[Job]:
    """The latest knowledge jobs of ``expert``, newest first."""
    return Job.objects.filter(kind__in=JOB_KINDS, params__expert=expert.slug)[:limit]


def expert_document_texts(slugs: list[str]) -> list[str]:
    """The texts of the experts' current documents (what their collections were indexed from)."""
    return list(Document.objects.filter(expert__slug__in=slugs).values_list("text", flat=True))
