"""Reads of the experiments pages: what the new-experiment form offers."""

from __future__ import annotations

from typing import Any

from experts.models import ExpertVersion


def experiment_choices(experts: Any, include_router: bool) -> tuple[list[tuple[str, str, list[tuple[int, str]]]], list[tuple[int, str]]]:
    """What the new-experiment form offers: each expert's versions ("v3, serving now") and the router's (staff only)."""
    from routing.models import RouterVersion

    by_expert: dict[str, tuple[str, list[tuple[int, str]]]] = {}
    for expert in experts.order_by("name"):
        by_expert[expert.slug] = (expert.name, [])
    rows = ExpertVersion.objects.filter(expert__in=experts).exclude(status="failed").order_by("expert__slug", "-version")
    for slug, number, status in rows.values_list("expert__slug", "version", "status"):
        if slug in by_expert:
            by_expert[slug][1].append((number, f"v{number}, {'serving now' if status == 'active' else status}"))
    router: list[tuple[int, str]] = []
    if include_router:
        router = [(v, f"v{v}{', serving now' if active else ''}") for v, active in RouterVersion.objects.order_by("-version").values_list("version", "is_active")]
    return [(slug, name, versions) for slug, (name, versions) in by_expert.items()], router
