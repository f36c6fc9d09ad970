"""Serializers for the jobs API."""

from __future__ import annotations

from django.urls import reverse
from rest_framework import serializers

from ..models import Job


class JobSerializer(serializers.ModelSerializer):
    """A job's state as a client polling it needs: status, progress, message, result or error."""

    percent = serializers.IntegerField(read_only=True)
    console_url = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id", "kind", "title", "status", "progress", "percent", "message", "result", "error",
            "attempts", "queue", "claimed_by", "heartbeat_at", "created_at", "started_at", "finished_at", "console_url",
        ]
        read_only_fields = fields

    def get_console_url(self, job: Job) -> str:
        return reverse("console-job", args=[job.pk])


class JobAcceptedSerializer(serializers.Serializer):
    """The background job a request enqueued (or the active one doing the same work): poll ``status_url``."""

    job = serializers.IntegerField()
    status = serializers.CharField()
    status_url = serializers.CharField()
    console_url = serializers.CharField()
