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


def serving_adapters() -> list:
    """The active version's adapter of every active expert that has one, as ``AdapterRef``s (for vLLM's --lora-modules)."""
    from .generation.base import AdapterRef
    from .models import ExpertVersion

    versions = ExpertVersion.objects.filter(status="active", expert__status=ExpertStatus.ACTIVE).exclude(adapter_path="").select_related("expert")
    return [AdapterRef(expert=v.expert.slug, name=v.adapter_name, path=v.adapter_path, base_model=v.base_model, version=v.version) for v in versions]


def serving_version(slug: str):
    """The active ExpertVersion of ``slug``, or None (the expert answers with the base model / extractively)."""
    from .models import ExpertVersion

    return ExpertVersion.objects.filter(expert__slug=slug, status="active").first()
