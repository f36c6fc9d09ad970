"""The traffic heatmap: requests per expert and time bucket, each expert's share against its fair share, the
load alarm's threshold, and the router's choice against reviewers' labels (the page, and the JSON its charts fetch)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count
from django.db.models.functions import TruncDay, TruncHour
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views import View
from django.views.generic import TemplateView

from experts.access import visible_slugs
from experts.models import Expert
from experts.selectors import active_experts
from routing.ml.diagnostics import shares_cv
from routing.models import RoutingEvent
from sbcommon.console import LoginRequiredMixin


class HeatmapView(LoginRequiredMixin, TemplateView):
    """Requests per expert and time bucket, each expert's share against its fair share, the alarm, and
    the router's choice against reviewers' labels. The charts draw from ``console-heatmap-data``."""

    template_name = "console/heatmap.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        heatmap = _heatmap_for(self.request)
        context.update(
            heatmap=heatmap,
            windows=[(key, label) for key, (label, _, _) in HEATMAP_WINDOWS.items()],
            over=[row for row in heatmap.rows if row.over_threshold],
            confusion=_confusion_for(self.request, heatmap),
        )
        return context


class HeatmapDataView(LoginRequiredMixin, View):
    """The heatmap and the review confusion as JSON (what the page's charts fetch)."""

    def get(self, request: HttpRequest) -> JsonResponse:
        heatmap = _heatmap_for(request)
        return JsonResponse({**heatmap_json(heatmap), "confusion": _confusion_for(request, heatmap)})


def _heatmap_for(request: HttpRequest) -> Heatmap:
    """The heatmap of the window asked for, limited to the experts the user may see (shares stay of all traffic)."""
    heatmap = traffic_heatmap(request.GET.get("window", DEFAULT_HEATMAP_WINDOW), threshold=settings.ROUTER_ALARM_SHARE,
                                       min_requests=settings.LOAD_ALARM_MIN_REQUESTS)
    if request.user.is_staff:
        return heatmap
    visible = visible_slugs(request.user)
    return replace(heatmap, rows=[r for r in heatmap.rows if r.slug in visible])


def _confusion_for(request: HttpRequest, heatmap: Heatmap) -> dict[str, Any]:
    visible = None if request.user.is_staff else visible_slugs(request.user)
    return review_confusion(since=heatmap.buckets[0], visible=visible)


# --- reads ----------------------------------------------------------------------------------------

# window key → (label, number of buckets, bucket size); the buckets end with the current one.
HEATMAP_WINDOWS: dict[str, tuple[str, int, str]] = {
    "24h": ("Last 24 hours, by hour", 24, "hour"),
    "7d": ("Last 7 days, by day", 7, "day"),
    "30d": ("Last 30 days, by day", 30, "day"),
}


DEFAULT_HEATMAP_WINDOW = "24h"


@dataclass(frozen=True)
class HeatCell:
    """One expert-by-time-bucket cell: its request count and its intensity (count / busiest cell, 0 to 1)."""

    count: int
    intensity: float
    start: datetime | None = None  # the bucket's time span: the cell links to the traces in it
    end: datetime | None = None


@dataclass(frozen=True)
class HeatRow:
    """One expert's line of the heatmap and its share of the window's traffic."""

    slug: str
    name: str
    active: bool
    cells: list[HeatCell]
    total: int
    share: float
    over_threshold: bool


@dataclass(frozen=True)
class Heatmap:
    """Expert-by-time-bucket request counts for one window, with the load balance across experts."""

    window: str
    label: str
    unit: str
    buckets: list[datetime]
    rows: list[HeatRow]
    total: int
    abstained: int
    fair_share: float
    load_cv: float
    threshold: float


def heatmap_buckets(window: str, now: datetime) -> list[datetime]:
    """The starts of the window's buckets, oldest first, ending with the bucket that holds ``now``."""
    _, n, unit = HEATMAP_WINDOWS[window]
    local = timezone.localtime(now)
    if unit == "hour":
        # Step in UTC so a daylight-saving change never repeats or skips an hour.
        end = local.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        return [timezone.localtime(end - timedelta(hours=i)) for i in reversed(range(n))]
    end = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return [end - timedelta(days=i) for i in reversed(range(n))]


def traffic_heatmap(window: str = DEFAULT_HEATMAP_WINDOW, now: datetime | None = None, threshold: float = 0.45, min_requests: int = 0) -> Heatmap:
    """Routed requests per answering expert and time bucket over ``window`` (a key of ``HEATMAP_WINDOWS``).

    Rows are the active experts plus any other expert that answered in the window. Shares are of the
    requests some expert answered (abstentions are counted apart); the fair share is 1/N of the active
    experts and the load CV is taken over their shares. A row is over the threshold only when the
    window holds at least ``min_requests`` answered requests (``LOAD_ALARM_MIN_REQUESTS``).
    """
    if window not in HEATMAP_WINDOWS:
        window = DEFAULT_HEATMAP_WINDOW
    label, _, unit = HEATMAP_WINDOWS[window]
    buckets = heatmap_buckets(window, now or timezone.now())
    trunc = TruncHour("created_at") if unit == "hour" else TruncDay("created_at")
    events = RoutingEvent.objects.filter(created_at__gte=buckets[0]).order_by()
    counts: dict[tuple[str, datetime], int] = {}
    for row in events.annotate(bucket=trunc).values("expert", "bucket").annotate(n=Count("id")):
        key = (row["expert"], row["bucket"])
        counts[key] = counts.get(key, 0) + row["n"]
    abstained = sum(n for (slug, _), n in counts.items() if not slug)
    counts = {key: n for key, n in counts.items() if key[0]}

    active = set(active_experts().values_list("slug", flat=True))
    seen = {slug for slug, _ in counts}
    names = dict(Expert.objects.filter(slug__in=active | seen).values_list("slug", "name"))
    slugs = sorted(active | seen, key=lambda s: (names.get(s, s).lower(), s))
    total = sum(counts.values())
    busiest = max(counts.values(), default=0)
    fair = 1 / len(active) if active else (1 / len(slugs) if slugs else 0.0)
    rows = []
    for slug in slugs:
        step = timedelta(hours=1) if unit == "hour" else timedelta(days=1)
        cells = [HeatCell(n, n / busiest if busiest else 0.0, b, b + step) for n, b in ((counts.get((slug, b), 0), b) for b in buckets)]
        expert_total = sum(c.count for c in cells)
        share = expert_total / total if total else 0.0
        rows.append(HeatRow(slug, names.get(slug, slug), slug in active, cells, expert_total, share, share > threshold and total >= min_requests))
    return Heatmap(
        window=window, label=label, unit=unit, buckets=buckets, rows=rows, total=total, abstained=abstained,
        fair_share=fair, load_cv=shares_cv([r.share for r in rows if r.active] if active else [r.share for r in rows]),
        threshold=threshold,
    )


def heatmap_json(heatmap: Heatmap) -> dict[str, Any]:
    """The heatmap as plain JSON for the page's charts and for anyone scripting against the console."""
    return {
        "window": heatmap.window, "label": heatmap.label, "unit": heatmap.unit,
        "buckets": [b.isoformat() for b in heatmap.buckets],
        "experts": [
            {"slug": r.slug, "name": r.name, "active": r.active, "counts": [c.count for c in r.cells], "total": r.total,
             "share": round(r.share, 6), "over_threshold": r.over_threshold}
            for r in heatmap.rows
        ],
        "total": heatmap.total, "abstained": heatmap.abstained, "fair_share": round(heatmap.fair_share, 6),
        "load_cv": round(heatmap.load_cv, 6), "threshold": heatmap.threshold,
    }


def review_confusion(since: datetime | None = None, visible: set[str] | None = None) -> dict[str, Any]:
    """Router choice by reviewed label over the review decisions (the confusion between domains).

    ``rows`` are the routed experts ("" when the router abstained), ``columns`` the reviewed labels;
    each cell counts decisions. ``agreement`` is the diagonal's share of all labelled decisions.
    """
    from labeling.models import ReviewDecision

    qs = ReviewDecision.objects.filter(expert__isnull=False)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    pairs = list(qs.order_by().values_list("routed_expert", "expert__slug").annotate(n=Count("id")))
    if visible is not None:
        pairs = [(r, c, n) for r, c, n in pairs if (not r or r in visible) and c in visible]
    routed = sorted({r for r, _, _ in pairs}, key=lambda s: (s == "", s))
    labels = sorted({c for _, c, _ in pairs})
    counts = {(r, c): n for r, c, n in pairs}
    total = sum(counts.values())
    agree = sum(n for (r, c), n in counts.items() if r == c)
    busiest = max(counts.values(), default=0)
    return {
        "columns": labels,
        "rows": [
            {"routed": r, "cells": [{"label": c, "n": counts.get((r, c), 0), "diagonal": r == c,
                                     "intensity": counts.get((r, c), 0) / busiest if busiest else 0.0} for c in labels],
             "total": sum(counts.get((r, c), 0) for c in labels)}
            for r in routed
        ],
        "total": total,
        "agreement": agree / total if total else None,
    }

