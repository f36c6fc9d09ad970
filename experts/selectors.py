"""Reads of experts."""

from __future__ import annotations

from django.db.models import QuerySet

from .choices import ExpertStatus
from .models import Expert


def active_experts() -> QuerySet[Expert]:
    """Experts the router may choose."""
    return Expert.objects.filter(status=ExpertStatus.ACTIVE)


def expert_by_slug(slug: str) -> Expert | None:
    return Expert.objects.filter(slug=slug).first()
