"""Reads of knowledge-base state."""

from __future__ import annotations

from django.db.models import Count, Sum

from .models import Document


def document_counts() -> dict[int, dict[str, int]]:
    """Per expert id: number of documents and chunks."""
    rows = Document.objects.values("expert_id").annotate(documents=Count("id"), chunks=Sum("chunk_count"))
    return {r["expert_id"]: {"documents": r["documents"], "chunks": r["chunks"] or 0} for r in rows}
