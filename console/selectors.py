"""Reads for the console pages that span apps: traffic, the heatmap, expert health, misroutes, the review queue, alarms."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, F, Q, QuerySet
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from experts.models import Expert
from experts.selectors import active_experts
from jobs.choices import ACTIVE_STATUSES
from jobs.models import Job
from knowledge.selectors import document_counts
from routing.experiments import selectors as experiment_selectors
from routing.experiments.choices import AlarmStatus
from routing.experiments.models import Alarm
from routing.models import Feedback, RoutingEvent
from routing.selectors import as_number, event_is_visible, event_slugs_for


def playground_modes(slugs: set[str] | None = None) -> list[tuple[str, str]]:
    """Choices for the playground's mode select: the router's modes, then each active expert (of ``slugs`` when given)."""
    modes = [("auto", "auto — top 2 experts"), ("auto:fast", "auto:fast — top expert only, light router")]
    experts = active_experts() if slugs is None else active_experts().filter(slug__in=slugs)
    modes += [(slug, f"{slug} — {name} (bypass router)") for slug, name in experts.order_by("slug").values_list("slug", "name")]
    return modes


# --- traffic heatmap -----------------------------------------------------------------------------

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

    @property
    def share_percent(self) -> float:
        return 100 * self.share


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

    @property
    def fair_share_percent(self) -> float:
        return 100 * self.fair_share

    @property
    def threshold_percent(self) -> float:
        return 100 * self.threshold


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


def load_cv(shares: list[float]) -> float:
    """Coefficient of variation (population std / mean) of traffic shares; 0 is perfectly even."""
    if not shares:
        return 0.0
    mean = sum(shares) / len(shares)
    if mean <= 0:
        return 0.0
    return (sum((s - mean) ** 2 for s in shares) / len(shares)) ** 0.5 / mean


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
        fair_share=fair, load_cv=load_cv([r.share for r in rows if r.active] if active else [r.share for r in rows]),
        threshold=threshold,
    )


# --- console for domain teams: circuit state, alarms, traffic, expert page, review queue ----------

UNKNOWN_CIRCUIT = "unknown"


def circuit_states(slugs: list[str]) -> dict[str, str]:
    """Each expert's circuit-breaker state (closed, open, half_open), or "unknown" when it cannot be read.

    The breaker lives in ``experts.breaker``; reading it must never break a console page (a cache
    backend that is down shows "unknown" rather than an error page).
    """
    try:
        from experts.breaker import all_breakers
    except ImportError:
        return dict.fromkeys(slugs, UNKNOWN_CIRCUIT)
    try:
        snapshots = all_breakers(slugs)
    except Exception:  # the cache behind the breaker is down: say unknown, keep the page
        return dict.fromkeys(slugs, UNKNOWN_CIRCUIT)
    return {s: str((snapshots.get(s) or {}).get("state") or UNKNOWN_CIRCUIT) for s in slugs}


def open_alarms(visible: set[str] | None = None, limit: int = 10) -> list[Alarm]:
    """The latest open alarms, newest first.

    With ``visible`` (a team member's experts), only the alarms they may see (``visible_alarms``: by the
    experts an alarm concerns, whatever its subject).
    """
    return list(experiment_selectors.visible_alarms(visible).filter(status=AlarmStatus.OPEN).order_by("-pk")[:limit])


def _start_of_day(now: datetime) -> datetime:
    return timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class TrafficSummary:
    today: int
    week: int
    abstained_week: int
    grounded_week: int

    @property
    def hit_rate(self) -> float | None:
        answered = self.week - self.abstained_week
        return self.grounded_week / answered if answered > 0 else None


def traffic_summary(slugs: set[str] | None = None, now: datetime | None = None) -> TrafficSummary:
    """Requests today and in the last 7 days (to ``slugs``' experts when given), abstentions and grounded answers."""
    now = now or timezone.now()
    events = RoutingEvent.objects.order_by()
    if slugs is not None:
        events = events.filter(expert__in=slugs)
    week = events.filter(created_at__gte=_start_of_day(now) - timedelta(days=6))
    counts = week.aggregate(
        n=Count("id"), n_abstained=Count("id", filter=Q(abstained=True)), n_grounded=Count("id", filter=Q(grounded=True, abstained=False)),
        n_today=Count("id", filter=Q(created_at__gte=_start_of_day(now))),
    )
    return TrafficSummary(today=counts["n_today"], week=counts["n"], abstained_week=counts["n_abstained"], grounded_week=counts["n_grounded"])


@dataclass(frozen=True)
class ExpertHealth:
    """One overview line: the expert, its circuit state, its share of last week's load and its hit rate."""

    expert: Expert
    circuit: str
    requests_today: int
    requests_week: int
    share: float
    fair_share: float
    hit_rate: float | None
    documents: int
    chunks: int
    over_threshold: bool

    @property
    def share_percent(self) -> float:
        return 100 * self.share

    @property
    def hit_rate_percent(self) -> float | None:
        return None if self.hit_rate is None else 100 * self.hit_rate


def expert_health(experts: list[Expert], threshold: float = 0.45, now: datetime | None = None, min_requests: int = 0) -> list[ExpertHealth]:
    """Health lines for ``experts``: shares are of every request some expert answered in the last 7 days.

    An expert is over the threshold only when those requests number at least ``min_requests``.

    Hit rate is the share of an expert's answers that were grounded in retrieved passages.
    """
    now = now or timezone.now()
    since = _start_of_day(now) - timedelta(days=6)
    rows = (
        RoutingEvent.objects.filter(created_at__gte=since).exclude(expert="").order_by().values("expert")
        .annotate(n=Count("id"), n_grounded=Count("id", filter=Q(grounded=True)), n_today=Count("id", filter=Q(created_at__gte=_start_of_day(now))))
    )
    by_slug = {r["expert"]: r for r in rows}
    total = sum(r["n"] for r in by_slug.values())
    n_active = max(1, active_experts().count())
    counts = document_counts()
    circuits = circuit_states([e.slug for e in experts])
    out = []
    for e in experts:
        r = by_slug.get(e.slug, {"n": 0, "n_grounded": 0, "n_today": 0})
        share = r["n"] / total if total else 0.0
        out.append(ExpertHealth(
            expert=e, circuit=circuits.get(e.slug, UNKNOWN_CIRCUIT), requests_today=r["n_today"], requests_week=r["n"], share=share,
            fair_share=1 / n_active, hit_rate=(r["n_grounded"] / r["n"]) if r["n"] else None,
            documents=counts.get(e.pk, {}).get("documents", 0), chunks=counts.get(e.pk, {}).get("chunks", 0), over_threshold=share > threshold and total >= min_requests,
        ))
    return out


def running_jobs(job_ids_visible: QuerySet[Job] | None = None, limit: int = 10) -> list[Job]:
    """Queued and running jobs, oldest first (from ``job_ids_visible`` when given)."""
    qs = Job.objects.all() if job_ids_visible is None else job_ids_visible
    return list(qs.filter(status__in=ACTIVE_STATUSES).order_by("created_at", "id")[:limit])


def daily_traffic(slug: str, days: int = 14, now: datetime | None = None) -> list[tuple[datetime, int]]:
    """Requests answered by ``slug`` per day over the last ``days`` days, oldest first (empty days included)."""
    end = _start_of_day(now or timezone.now())
    starts = [end - timedelta(days=i) for i in reversed(range(days))]
    rows = (
        RoutingEvent.objects.filter(expert=slug, created_at__gte=starts[0]).order_by()
        .annotate(day=TruncDay("created_at")).values("day").annotate(n=Count("id"))
    )
    counts = {timezone.localtime(r["day"]).date(): r["n"] for r in rows}
    return [(start, counts.get(start.date(), 0)) for start in starts]


def recent_questions(slug: str, limit: int = 20) -> list[RoutingEvent]:
    """The latest questions ``slug`` answered whose text was stored (``STORE_QUESTION_TEXT``)."""
    return list(RoutingEvent.objects.filter(expert=slug).exclude(question="").order_by("-created_at", "-id")[:limit])


@dataclass(frozen=True)
class Misroute:
    """A reported misroute of one expert: a thumbs-down, or a reviewer's label that differs from the router's choice."""

    request_id: str
    created_at: datetime
    kind: str  # "thumbs_down" | "reviewed"
    question: str
    routed_expert: str
    right_expert: str
    comment: str


def misroutes(slug: str, limit: int = 30) -> list[Misroute]:
    """Thumbs-down answers ``slug`` gave, and reviewed questions routed to or away from it wrongly, newest first."""
    from labeling.models import ReviewDecision

    out: list[Misroute] = []
    feedback = list(Feedback.objects.filter(expert=slug, rating=-1).order_by("-created_at")[:limit])
    questions = dict(RoutingEvent.objects.filter(request_id__in=[f.request_id for f in feedback]).values_list("request_id", "question"))
    decided = {
        d.request_id: d for d in ReviewDecision.objects.filter(request_id__in=[f.request_id for f in feedback]).select_related("expert")
    }
    for f in feedback:
        d = decided.get(f.request_id)
        out.append(Misroute(f.request_id, f.created_at, "thumbs_down", questions.get(f.request_id, ""), slug,
                            d.expert.slug if d and d.expert else "", f.comment))
    reviewed = (
        ReviewDecision.objects.filter(expert__isnull=False).filter(Q(routed_expert=slug) | Q(expert__slug=slug))
        .exclude(expert__slug=F("routed_expert")).select_related("expert", "query").order_by("-created_at")[:limit]
    )
    seen = {m.request_id for m in out}
    for d in reviewed:
        if d.request_id not in seen:
            out.append(Misroute(d.request_id, d.created_at, "reviewed", d.query.text if d.query else "", d.routed_expert, d.expert.slug, ""))
    return sorted(out, key=lambda m: m.created_at, reverse=True)[:limit]


# The review queue ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReviewItem:
    """One served question waiting for a reviewer: why it is queued and what the router did."""

    event: RoutingEvent
    reasons: tuple[str, ...]
    top_score: float | None
    margin: float | None
    feedback_comment: str
    suggested_expert: str = ""  # who the user said should have answered ("wrong expert")

    @property
    def reason(self) -> str:
        return primary_reason(self.reasons)


def primary_reason(reasons: tuple[str, ...]) -> str:
    """The reason recorded with a decision: a thumbs-down wins, then abstention, then low confidence."""
    for r in ("thumbs_down", "abstained", "low_confidence"):
        if r in reasons:
            return r
    return "low_confidence"


def _scores(event: RoutingEvent) -> list[float]:
    ranked = event.experts if isinstance(event.experts, list) else []
    scores = []
    for e in ranked:
        value = as_number(e.get("score")) if isinstance(e, dict) else None
        if value is not None:
            scores.append(value)
    return sorted(scores, reverse=True)


def review_reasons(event: RoutingEvent, thumbs_down: bool, min_score: float, min_margin: float) -> tuple[tuple[str, ...], float | None, float | None]:
    """Why ``event`` needs review (if at all), with its top score and top-2 margin.

    Only routed requests (``auto`` modes with a router version) can be low-confidence: a request
    that named its expert was not routed.
    """
    scores = _scores(event)
    top = scores[0] if scores else None
    margin = scores[0] - scores[1] if len(scores) > 1 else None
    reasons = []
    if thumbs_down:
        reasons.append("thumbs_down")
    if event.abstained:
        reasons.append("abstained")
    elif event.router_version is not None and (
        (top is not None and top < min_score) or (margin is not None and margin < min_margin)
    ):
        reasons.append("low_confidence")
    return tuple(reasons), top, margin


def review_queue(visible: set[str] | None, min_score: float, min_margin: float, days: int = 30, scan: int = 2000, limit: int = 50) -> list[ReviewItem]:
    """Questions to label, newest first: thumbs-down answers, abstentions and low-confidence routings.

    Only the last ``scan`` events of the last ``days`` days are examined, so the page stays quick on
    a busy install; questions already decided (``ReviewDecision``) are left out. An item is shown
    when the user may see its event (``routing.selectors.event_is_visible`` with ``visible``, the
    experts they may see; ``None`` for staff: all of them): its answering expert is in ``visible``, or,
    answered by no expert, one of its candidates is. A "wrong expert" proposal naming an expert
    outside ``visible`` is left out of the item (another team's label stays theirs).
    """
    from labeling.models import ReviewDecision

    since = timezone.now() - timedelta(days=days)
    reports = list(Feedback.objects.filter(rating=-1, created_at__gte=since).only("request_id", "comment", "suggested_expert"))
    down = {f.request_id: f.comment for f in reports}
    suggested = {f.request_id: f.suggested_expert for f in reports if f.suggested_expert}
    events = list(
        RoutingEvent.objects.filter(created_at__gte=since).filter(
            Q(abstained=True) | Q(router_version__isnull=False) | Q(request_id__in=list(down))
        ).order_by("-created_at", "-id")[:scan]
    )
    decided = set(ReviewDecision.objects.filter(request_id__in=[e.request_id for e in events]).values_list("request_id", flat=True))
    items: list[ReviewItem] = []
    seen: set[str] = set()
    for event in events:
        if event.request_id in decided or event.request_id in seen or not event_is_visible(event, visible):
            continue
        reasons, top, margin = review_reasons(event, event.request_id in down, min_score, min_margin)
        if reasons:
            seen.add(event.request_id)
            proposed = suggested.get(event.request_id, "")
            items.append(ReviewItem(event, reasons, top, margin, down.get(event.request_id, ""),
                                    proposed if visible is None or proposed in visible else ""))
            if len(items) >= limit:
                break
    return items


@dataclass(frozen=True)
class RecentDecision:
    """One of the review queue's recent decisions as a user may see it: the decision and who to say made it."""

    decision: Any  # labeling.models.ReviewDecision
    reviewer: str  # the reviewer's username; "another team" for a member of no team of the viewer's


ANOTHER_TEAM = "another team"


def recent_decisions(user: Any, limit: int = 15, scan: int = 50) -> list[RecentDecision]:
    """The latest review decisions ``user`` may see, newest first (of the last ``scan``).

    A decision is shown with its question when the user may see the question's event
    (``routing.selectors.event_is_visible``; once retention removed the event, when its answering
    expert is one they may see, so a question no expert answered is then staff's only) and its label,
    if any, is an expert they may see. The reviewer is named when they are the user, staff, or in one
    of the user's teams; otherwise "another team". Staff see every decision and every name.
    """
    from labeling.models import ReviewDecision

    decisions = list(ReviewDecision.objects.select_related("expert", "user", "query").prefetch_related("user__groups")[:scan])
    slugs = event_slugs_for(user)
    if slugs is not None:
        events: dict[str, RoutingEvent] = {}
        for event in RoutingEvent.objects.filter(request_id__in=[d.request_id for d in decisions]).order_by("created_at", "id"):
            events[event.request_id] = event  # the latest event of a request id wins, as on the trace page
        decisions = [
            d for d in decisions
            if (event_is_visible(events[d.request_id], slugs) if d.request_id in events else bool(d.routed_expert) and d.routed_expert in slugs)
            and (d.expert is None or d.expert.slug in slugs)
        ]
    mine = set() if slugs is None else set(user.groups.values_list("pk", flat=True))
    out = []
    for d in decisions[:limit]:
        reviewer = d.user
        if reviewer is None:
            name = ""
        elif slugs is None or reviewer.pk == user.pk or reviewer.is_staff or mine & {g.pk for g in reviewer.groups.all()}:
            name = reviewer.get_username()
        else:
            name = ANOTHER_TEAM
        out.append(RecentDecision(d, name))
    return out


def group_identical(items: list[ReviewItem]) -> list[list[ReviewItem]]:
    """``items`` grouped by their question (case and spacing ignored), in first-seen order; without text each stands alone."""
    groups: dict[str, list[ReviewItem]] = {}
    for item in items:
        text = " ".join(item.event.question.lower().split())
        groups.setdefault(text or f"#{item.event.pk}", []).append(item)
    return list(groups.values())


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


def filter_heatmap(heatmap: Heatmap, visible: set[str]) -> Heatmap:
    """The heatmap with only the experts in ``visible`` (totals and CV stay platform-wide: shares are of all traffic)."""
    from dataclasses import replace

    return replace(heatmap, rows=[r for r in heatmap.rows if r.slug in visible])

