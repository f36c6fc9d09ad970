"""Serializers for the labeling API."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from rest_framework import serializers

from sbcommon.api import ApiError

from .. import services


class QueryImportSerializer(serializers.Serializer):
    """A query log upload: the file (CSV/TSV with a ``text`` column, or JSON Lines), its source, its team, and whether to redact."""

    file = serializers.FileField(allow_empty_file=True, use_url=False, help_text="CSV/TSV with a 'text' column, or JSON Lines.")
    source = serializers.CharField(max_length=128, required=False, allow_blank=True, default="", help_text="Default: the file name.")
    redact = serializers.BooleanField(required=False, default=False, help_text="Replace e-mail addresses and phone numbers.")
    team = serializers.SlugRelatedField(
        slug_field="name", queryset=Group.objects.all(), required=False, allow_null=True, default=None,
        help_text="The team (by name) the queries belong to. Default: the caller's only team; staff may leave it out for staff-only queries.",
    )

    def validate_file(self, upload: Any) -> Any:
        try:
            services.check_upload(upload)
        except services.UploadRejected as exc:
            if exc.status == 413:
                raise ApiError(str(exc), status_code=413, code="file_too_large", param="file") from exc
            raise serializers.ValidationError(str(exc)) from exc
        return upload


class ImportAcceptedSerializer(serializers.Serializer):
    """The import job that was enqueued (or the active one for the same file)."""

    job = serializers.IntegerField()
    status = serializers.CharField()
    status_url = serializers.CharField()
    console_url = serializers.CharField()
