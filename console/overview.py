"""The overview, the console's home page: traffic today and this week, the experts the user may see with
their health (circuit state, share of the load, grounded answers, documents), the router, jobs and alarms."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone
from django.views.generic import RedirectView, TemplateView

from experts.access import visible_experts, visible_slugs
from experts.breaker import all_breakers
from experts.choices import ExpertStatus
from experts.models import Expert
from experts.redaction import redactor_for
from jobs.choices import ACTIVE_STATUSES
from jobs.views import shown, visible_jobs
from knowledge.selectors import document_counts
from routing import selectors as routing_selectors
from routing.alarms import selectors as alarm_selectors
from routing.alarms.choices import AlarmStatus
from routing.alarms.models import Alarm
from routing.models import RoutingEvent
from sbcommon.console import LoginRequiredMixin

from .nav import optional_url


class OverviewView(LoginRequiredMixin, TemplateView):
    """Traffic today and this week, the experts the user may see with their health, the router, jobs and alarms."""

    template_name = "console/overview.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = self.request.user
        router = routing_selectors.active_router()
        accuracy = routing_selectors.validation_accuracy(router)
        experts = list(visible_experts(user).order_by("name", "slug"))
        slugs = None if user.is_staff else {e.slug for e in experts}  # a team member's figures: their experts' only
        health = expert_health(experts, threshold=settings.ROUTER_ALARM_SHARE, min_requests=settings.LOAD_ALARM_MIN_REQUESTS)
        jobs = visible_jobs(user, visible_slugs)  # by the jobs pages' rule, with the expert access rules filled in
        context.update(
            experts=health,
            active_count=sum(1 for h in health if h.expert.status == ExpertStatus.ACTIVE),
            traffic=traffic_summary(slugs),
            router=router,
            router_accuracy=accuracy,
            router_accuracy_percent=None if accuracy is None else 100 * accuracy,
            labels=label_quality(slugs),
            running=shown_jobs(user, list(jobs.filter(status__in=ACTIVE_STATUSES).order_by("created_at", "id")[:10])),  # oldest first
            jobs=shown_jobs(user, list(jobs[:5])),
            alarms=open_alarms(slugs),
            alarms_url=optional_url("console-alarms"),
            over=[h for h in health if h.over_threshold],
            threshold_percent=100 * settings.ROUTER_ALARM_SHARE,
        )
        return context


class ExpertsView(LoginRequiredMixin, RedirectView):
    """``/experts/``, an expert page's URL cut short: the experts are listed on the overview."""

    def get_redirect_url(self, *args: Any, **kwargs: Any) -> str:
        return reverse("console-overview") + "#experts"


# --- reads ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LabelQuality:
    """How far the labels the router learnt from can be trusted: its validation figure is agreement with them, no more.

    ``reviewed``/``reviewed_percent``: review decisions with a label, and the share that named the expert the router chose
    (``heatmap.review_confusion``'s agreement); ``discovered``/``elsewhere``: the latest discovery run's questions in a
    proposal whose documents were matched, and how many of them have their best-matching documents in another expert
    (``labeling.selectors.pointing_elsewhere``).
    """

    reviewed: int
    reviewed_percent: float | None
    discovered: int
    elsewhere: int

    @property
    def elsewhere_percent(self) -> float | None:
        return 100 * self.elsewhere / self.discovered if self.discovered else None


RUNS_LOOKED_AT = 10  # the Overview looks for document evidence in this many of the newest discovery runs


def label_quality(slugs: set[str] | None = None) -> LabelQuality:
    """The signals beside the router's agreement with its labels, over the experts in ``slugs`` (None: all)."""
    from labeling.models import Assignment, ClusteringRun
    from labeling.selectors import pointing_elsewhere

    from .heatmap import review_confusion

    confusion = review_confusion(visible=slugs)
    discovered = elsewhere = 0
    # The newest of the last few runs that matched its questions with documents (one indexed lookup a run, not a scan).
    runs = ClusteringRun.objects.all() if slugs is None else ClusteringRun.objects.filter(proposals__expert__slug__in=slugs).distinct()
    recent = runs.order_by("-created_at", "-id")[:RUNS_LOOKED_AT]
    run = next((r for r in recent if Assignment.objects.filter(run=r, documents_point_to__isnull=False).exists()), None)
    if run is not None:
        matched = Assignment.objects.filter(run=run, proposal__isnull=False, documents_point_to__isnull=False)
        pointing = pointing_elsewhere(run)
        if slugs is not None:
            matched, pointing = matched.filter(proposal__expert__slug__in=slugs), pointing.filter(proposal__expert__slug__in=slugs)
        discovered, elsewhere = matched.count(), pointing.count()
    agreement = confusion["agreement"]
    return LabelQuality(confusion["total"], None if agreement is None else 100 * agreement, discovered, elsewhere)


def shown_jobs(user: Any, jobs: list[Any]) -> list[Any]:
    """``jobs`` as the jobs pages show them to ``user``: other teams' experts left out of their text."""
    redact = redactor_for(user)
    return [shown(job, redact) for job in jobs]


UNKNOWN_CIRCUIT = "unknown"


def circuit_states(slugs: list[str]) -> dict[str, str]:
    """Each expert's circuit-breaker state (closed, open, half_open), or "unknown" when it cannot be read.

    The breaker lives in ``experts.breaker``; reading it must never break a console page (a cache
    backend that is down shows "unknown" rather than an error page).
    """
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
    return list(alarm_selectors.visible_alarms(visible).filter(status=AlarmStatus.OPEN).order_by("-pk")[:limit])


def start_of_day(now: datetime) -> datetime:
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
    week = events.filter(created_at__gte=start_of_day(now) - timedelta(days=6))
    counts = week.aggregate(
        n=Count("id"), n_abstained=Count("id", filter=Q(abstained=True)), n_grounded=Count("id", filter=Q(grounded=True, abstained=False)),
        n_today=Count("id", filter=Q(created_at__gte=start_of_day(now))),
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
    hit_rate: float | None
    documents: int
    chunks: int
    over_threshold: bool


def expert_health(experts: list[Expert], threshold: float = 0.45, now: datetime | None = None, min_requests: int = 0) -> list[ExpertHealth]:
    """Health lines for ``experts``: shares are of every request some expert answered in the last 7 days.

    An expert is over the threshold only when those requests number at least ``min_requests``.

    Hit rate is the share of an expert's answers that were grounded in retrieved passages.
    """
    now = now or timezone.now()
    since = start_of_day(now) - timedelta(days=6)
    rows = (
        RoutingEvent.objects.filter(created_at__gte=since).exclude(expert="").order_by().values("expert")
        .annotate(n=Count("id"), n_grounded=Count("id", filter=Q(grounded=True)), n_today=Count("id", filter=Q(created_at__gte=start_of_day(now))))
    )
    by_slug = {r["expert"]: r for r in rows}
    total = sum(r["n"] for r in by_slug.values())
    counts = document_counts()
    circuits = circuit_states([e.slug for e in experts])
    out = []
    for e in experts:
        r = by_slug.get(e.slug, {"n": 0, "n_grounded": 0, "n_today": 0})
        share = r["n"] / total if total else 0.0
        out.append(ExpertHealth(
            expert=e, circuit=circuits.get(e.slug, UNKNOWN_CIRCUIT), requests_today=r["n_today"], requests_week=r["n"], share=share,
            hit_rate=(r["n_grounded"] / r["n"]) if r["n"] else None,
            documents=counts.get(e.pk, {}).get("documents", 0), chunks=counts.get(e.pk, {}).get("chunks", 0), over_threshold=share > threshold and total >= min_requests,
        ))
    return out


