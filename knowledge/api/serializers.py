"""Serializers for the knowledge API."""

from __future__ import annotations

from rest_framework import serializers

from ..models import Document


class DocumentUploadSerializer(serializers.Serializer):
    """One or more files under ``files`` (``file`` works too): text, Markdown, HTML, PDF, .docx or JSON Lines."""

    files = serializers.ListField(child=serializers.FileField(allow_empty_file=True, use_url=False), required=False,
                                  help_text="The files; send the field once per file.")
    file = serializers.FileField(allow_empty_file=True, use_url=False, required=False, help_text="A single file (same as one 'files').")


class UploadAcceptedSerializer(serializers.Serializer):
    """The ingest job that was enqueued (or the active one for the same files)."""

    job = serializers.IntegerField()
    status = serializers.CharField()
    status_url = serializers.CharField()
    console_url = serializers.CharField()


class DocumentSerializer(serializers.ModelSerializer):
    """A document of an expert's knowledge base, without its text."""

    class Meta:
        model = Document
        fields = ["id", "external_id", "title", "url", "version", "content_hash", "chunk_count", "indexed_at", "index_error", "metadata", "created_at", "updated_at"]
        read_only_fields = fields
