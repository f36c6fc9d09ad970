"""Reads for the console: experts with their knowledge and traffic, the active router, recent jobs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count
from django.utils import timezone

from experts.models import Expert
from experts.selectors import active_experts
from jobs.models import Job
from jobs.selectors import recent_jobs
from knowledge.selectors import document_counts

from .models import RouterVersion, RoutingEvent


@dataclass(frozen=True)
class ExpertRow:
    """One line of the overview's expert table."""

    name: str
    slug: str
    status: str
    status_label: str
    documents: int
    chunks: int
    requests_24h: int
    requests_total: int


def traffic_by_expert(since: datetime | None = None) -> dict[str, int]:
    """Number of routed requests per answering expert's slug, optionally only those after ``since``."""
    events = RoutingEvent.objects.all()
    if since is not None:
        events = events.filter(created_at__gte=since)
    rows = events.order_by().values("expert").annotate(n=Count("id"))
    return {r["expert"]: r["n"] for r in rows}


def expert_rows() -> list[ExpertRow]:
    """Every expert with its document and chunk counts and its traffic (last 24 h and all time)."""
    counts = document_counts()
    recent = traffic_by_expert(since=timezone.now() - timedelta(hours=24))
    total = traffic_by_expert()
    return [
        ExpertRow(
            name=e.name, slug=e.slug, status=e.status, status_label=e.get_status_display(),
            documents=counts.get(e.pk, {}).get("documents", 0), chunks=counts.get(e.pk, {}).get("chunks", 0),
            requests_24h=recent.get(e.slug, 0), requests_total=total.get(e.slug, 0),
        )
        for e in Expert.objects.order_by("name", "slug")
    ]


def active_router() -> RouterVersion | None:
    """The router version that serves requests, if one has been trained."""
    return RouterVersion.objects.filter(is_active=True).first()


def validation_accuracy(version: RouterVersion | None) -> float | None:
    """The validation accuracy recorded when ``version`` was trained (``metrics["val"]["accuracy"]``)."""
    if version is None:
        return None
    val = (version.metrics or {}).get("val") or {}
    accuracy = val.get("accuracy") if isinstance(val, dict) else None
    return float(accuracy) if accuracy is not None else None


def latest_jobs(limit: int = 5) -> list[Job]:
    """The newest jobs, for the overview."""
    return list(recent_jobs(limit))


def playground_modes() -> list[tuple[str, str]]:
    """Choices for the playground's mode select: the router's modes, then each active expert."""
    modes = [("auto", "auto — top 2 experts"), ("auto:fast", "auto:fast — top expert only")]
    modes += [(slug, f"{slug} — {name} (bypass router)") for slug, name in active_experts().order_by("slug").values_list("slug", "name")]
    return modes
