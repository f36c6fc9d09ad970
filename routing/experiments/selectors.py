"""Reads of the experiments pages and API: who sees and changes which experiment, and what the new-experiment form offers."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.http import Http404
from django.shortcuts import get_object_or_404

from experts.access import can_edit, can_view, visible_experts
from experts.models import ExpertVersion

from .choices import ExperimentKind
from .models import Experiment


def visible_experiments(user: Any) -> QuerySet[Experiment]:
    """The router's experiments (platform-wide) and those of the experts ``user`` may see."""
    return Experiment.objects.filter(Q(kind=ExperimentKind.ROUTER) | Q(expert__in=visible_experts(user))).select_related("expert")


def may_change(user: Any, expert: Any, kind: str) -> bool:
    """Staff change the router's experiments; an expert's, whoever may change the expert."""
    if kind == ExperimentKind.ROUTER:
        return bool(user.is_staff)
    return can_edit(user, expert)


def experiment_for(user: Any, pk: int) -> Experiment:
    """The experiment ``pk`` if ``user`` may see it; 404 otherwise (another team's expert's experiment is "not found")."""
    experiment = get_object_or_404(Experiment.objects.select_related("expert"), pk=pk)
    if experiment.kind == ExperimentKind.EXPERT and not can_view(user, experiment.expert):
        raise Http404("no such experiment")
    return experiment


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
