"""Creating and changing experts."""

from __future__ import annotations

from django.db import transaction
from django.utils.text import slugify

from .models import Expert


def unique_slug(base: str) -> str:
    """A slug derived from ``base`` that no expert uses yet."""
    root = slugify(base)[:56] or "expert"
    slug, n = root, 2
    while Expert.objects.filter(slug=slug).exists():
        slug, n = f"{root}-{n}", n + 1
    return slug


@transaction.atomic
def upsert_expert(slug: str, name: str, description: str = "", keywords: list[str] | None = None) -> tuple[Expert, bool]:
    """Create the expert ``slug`` or update its name, description and keywords; returns (expert, created)."""
    expert, created = Expert.objects.get_or_create(slug=slug, defaults={"name": name})
    expert.name = name
    if description:
        expert.description = description
    if keywords is not None:
        expert.keywords = keywords
    expert.save()
    return expert, created


def slug_for(name: str) -> str:
    """The slug an expert named ``name`` gets (stable: the same name gives the same slug)."""
    return slugify(name)[:64] or "expert"
