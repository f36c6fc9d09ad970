from __future__ import annotations

from django.db import models


class Document(models.Model):
    """One document of an expert's knowledge base, versioned by content hash."""

    expert = models.ForeignKey("experts.Expert", on_delete=models.CASCADE, related_name="documents")
    external_id = models.CharField(max_length=255, help_text="Stable id from the source (file name, doc id).")
    title = models.CharField(max_length=500)
    url = models.URLField(max_length=1000, blank=True)
    content_hash = models.CharField(max_length=64)
    version = models.PositiveIntegerField(default=1)
    text = models.TextField()
    metadata = models.JSONField(default=dict, blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    set_aside = models.FloatField(null=True, blank=True, help_text="Share of the indexed text an answer never quotes (menus, link lists, tag "
                                  "clouds: experts.ml.extractive.set_aside_share); searchable all the same. Empty: not indexed since.")
    indexed_at = models.DateTimeField(null=True, blank=True)
    index_error = models.TextField(blank=True, help_text="Why the current version could not be indexed (the previous one keeps serving).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["expert", "title"]
        constraints = [models.UniqueConstraint(fields=["expert", "external_id"], name="unique_document_per_expert")]

    def __str__(self) -> str:
        return self.title


class KnowledgeBase(models.Model):
    """What an expert's collection was built with: the embedding model and chunking that its vectors come from."""

    expert = models.OneToOneField("experts.Expert", on_delete=models.CASCADE, related_name="knowledge_base")
    embedding_model = models.CharField(max_length=255, help_text="EMBEDDING_MODEL the collection's vectors were made with.")
    dimension = models.PositiveIntegerField()
    chunk_size = models.PositiveIntegerField()
    chunk_overlap = models.PositiveIntegerField()
    built_at = models.DateTimeField(null=True, blank=True, help_text="Last full rebuild.")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.expert_id}: {self.embedding_model}"
