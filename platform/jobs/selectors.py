"""Reads of job rows."""

from __future__ import annotations

from django.db.models import QuerySet

from .models import Job


def recent_jobs(limit: int = 50) -> QuerySet[Job]:
    """The newest jobs first."""
    return Job.objects.all()[:limit]
