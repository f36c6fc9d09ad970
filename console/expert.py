"""One expert's page for its team (description, versions, knowledge base, traffic, recent questions,
misroutes, circuit state) and its two switches: the fallback expert (staff) and public asking (its team)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, Q
from django.db.models.functions import TruncDay
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views import View

from experts import services as expert_services
from experts.access import can_edit, get_expert_or_404
from knowledge import selectors as knowledge_selectors
from routing import selectors as routing_selectors
from routing.models import Feedback, RoutingEvent
from sbcommon.console import LoginRequiredMixin

from .nav import optional_url
from .overview import circuit_states, start_of_day


class ExpertView(LoginRequiredMixin, View):
    """One expert for its team: description, versions, knowledge base, traffic, recent questions, misroutes."""

    template_name = "console/expert.html"

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug)
        traffic = daily_traffic(expert.slug)
        busiest = max((n for _, n in traffic), default=0)
        context = {
            "expert": expert,
            "can_edit": can_edit(request.user, expert),
            "versions": list(expert.versions.order_by("-version")[:20]),
            "router": routing_selectors.active_router(),
            "knowledge": knowledge_selectors.summary(expert),
            "documents": list(knowledge_selectors.documents(expert)[:10]),
            "traffic": [{"day": day, "n": n, "percent": round(100 * n / busiest, 1) if busiest else 0.0} for day, n in traffic],
            "traffic_total": sum(n for _, n in traffic),
            "questions": recent_questions(expert.slug),
            "reports": reports(expert.slug),
            "circuit": circuit_states([expert.slug])[expert.slug],
            "adapters_url": optional_url("expert-adapters", expert.slug),
        }
        return render(request, self.template_name, context)


class ExpertFallbackView(LoginRequiredMixin, View):
    """POST (staff): make the expert the fallback for questions the router is not sure about, or stop it."""

    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff may choose the fallback expert: it answers every team's unsure questions.")
        expert = get_expert_or_404(request.user, slug)
        on = request.POST.get("fallback") == "on"
        expert_services.set_fallback(expert, on, user=request.user)
        messages.success(request, f"{expert.name} now answers the questions no expert is sure about." if on
                         else f"{expert.name} no longer answers the questions no expert is sure about.")
        return redirect("console-expert", slug=expert.slug)


class ExpertPublicView(LoginRequiredMixin, View):
    """POST (the expert's team or staff): let anyone ask the expert, signed in or not, or only its team again."""

    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug, edit=True)
        on = request.POST.get("public") == "on"
        expert_services.set_public(expert, on, user=request.user)
        messages.success(request, f"Anyone may now ask {expert.name}, signed in or not; its documents and pages stay your team's." if on
                         else f"Only {expert.team or 'staff'} may ask {expert.name} now.")
        return redirect("console-expert", slug=expert.slug)


# --- reads ----------------------------------------------------------------------------------------

def daily_traffic(slug: str, days: int = 14, now: datetime | None = None) -> list[tuple[datetime, int]]:
    """Requests answered by ``slug`` per day over the last ``days`` days, oldest first (empty days included)."""
    end = start_of_day(now or timezone.now())
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
    """A report on one of the expert's answers: a thumbs-down, or a reviewer's label that differs from the router's choice."""

    request_id: str
    created_at: datetime
    kind: str  # "thumbs_down" | "reviewed"
    question: str
    routed_expert: str
    right_expert: str  # "" when nobody said another expert should have answered
    comment: str


@dataclass(frozen=True)
class Reports:
    """An expert's reported answers: misroutes (another expert should have answered) apart from answers marked unhelpful."""

    misroutes: list[Misroute]
    unhelpful: list[Misroute]


def reports(slug: str, limit: int = 30) -> Reports:
    """Thumbs-down answers ``slug`` gave, and reviewed questions routed to or away from it wrongly, newest first.

    A thumbs-down is a misroute when the user suggested another expert or a reviewer labelled the
    question with another one; otherwise (no other expert named, or the reviewer agreed with the
    routing) the answer was unhelpful, not misrouted.
    """
    from labeling.models import ReviewDecision

    feedback = list(Feedback.objects.filter(expert=slug, rating=-1).order_by("-created_at")[:limit])
    questions = dict(RoutingEvent.objects.filter(request_id__in=[f.request_id for f in feedback]).values_list("request_id", "question"))
    decided = {
        d.request_id: d for d in ReviewDecision.objects.filter(request_id__in=[f.request_id for f in feedback]).select_related("expert")
    }
    wrong: list[Misroute] = []
    unhelpful: list[Misroute] = []
    for f in feedback:
        d = decided.get(f.request_id)
        right = (d.expert.slug if d.expert else "") if d else f.suggested_expert
        report = Misroute(f.request_id, f.created_at, "thumbs_down", questions.get(f.request_id, ""), slug, right if right != slug else "", f.comment)
        (wrong if report.right_expert else unhelpful).append(report)
    reviewed = (
        ReviewDecision.objects.filter(expert__isnull=False).filter(Q(routed_expert=slug) | Q(expert__slug=slug))
        .exclude(expert__slug=F("routed_expert")).select_related("expert", "query").order_by("-created_at")[:limit]
    )
    seen = {m.request_id for m in feedback}
    for d in reviewed:
        if d.request_id not in seen:
            wrong.append(Misroute(d.request_id, d.created_at, "reviewed", d.query.text if d.query else "", d.routed_expert, d.expert.slug, ""))
    return Reports(sorted(wrong, key=lambda m: m.created_at, reverse=True)[:limit], unhelpful)
