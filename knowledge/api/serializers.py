"""Serializers for the knowledge API."""

from __future__ import annotations

from rest_framework import serializers

from ..models import Document


class DocumentUploadSerializer(serializers.Serializer):
    """One or more files under ``files`` (``file`` works too): text, Markdown, HTML, PDF, .docx or JSON Lines."""

    files = serializers.ListField(child=serializers.FileField(allow_empty_file=True, use_url=False), required=False,
                                  help_text="The files; send the field once per file.")
    file = serializers.FileField(allow_empty_file=True, use_url=False, required=False, help_text="A single file (same as one 'files').")


class DocumentSerializer(serializers.ModelSerializer):
    """A document of an expert's knowledge base, without its text."""

    class Meta:
        model = Document
        fields = ["id", "external_id", "title", "url", "version", "content_hash", "chunk_count", "indexed_at", "index_error", "metadata", "created_at", "updated_at"]
        read_only_fields = fields
