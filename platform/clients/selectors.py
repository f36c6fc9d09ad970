"""Reads of API keys for the console."""

from __future__ import annotations

from django.db.models import QuerySet

from .models import ApiKey


def keys_for(user) -> QuerySet[ApiKey]:
    """The keys ``user`` may see and revoke: every key for staff, their own keys for anyone else."""
    qs = ApiKey.objects.select_related("created_by")
    if not getattr(user, "is_authenticated", False):
        return qs.none()
    return qs if user.is_staff else qs.filter(created_by=user)
