"""The review queue: low-confidence, abstained and thumbs-down questions to label with the right expert.

A user sees a queued question when they may see its event (``routing.selectors.visible_events``),
labels it only to an active expert they may change, and dismisses it only when they may change one of
its experts (``routing.selectors.event_experts``). Staff do everything.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views import View

from experts import access
from experts.access import get_expert_or_404, visible_experts
from experts.choices import ExpertStatus
from labeling.proposals import ReviewError
from labeling.services import record_review_decision
from routing import selectors as routing_selectors
from routing.models import Feedback, RoutingEvent
from routing.selectors import as_number, event_is_visible, event_slugs_for
from sbcommon.console import LoginRequiredMixin


class ReviewQueueView(LoginRequiredMixin, View):
    """Low-confidence, abstained and thumbs-down questions to label with the right expert.

    POST labels one: the question becomes router training data (``labeling.services.record_review_decision``);
    one decision per request id, so a double submit records one.
    """

    template_name = "console/review.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, self.template_name, _review_context(request))

    def post(self, request: HttpRequest) -> HttpResponse:
        if request.POST.get("bulk"):
            return self._bulk(request)
        choices = _review_choices(request.user)
        form = ReviewDecisionForm(request.POST, experts=choices)
        request_id = str(request.POST.get("request_id", ""))[:64]
        event = _reviewable_event(request.user, request_id)
        if event is None:
            raise Http404("no such request")
        if not form.is_valid():
            form.auto_id = f"id_%s_{event.pk}"
            return render(request, self.template_name, _review_context(request, {request_id: form}), status=400)
        expert = None
        if not form.cleaned_data["dismiss"]:
            expert = get_expert_or_404(request.user, form.cleaned_data["expert"], edit=True)
        elif not _may_dismiss(request.user, event):
            raise PermissionDenied("You may dismiss only questions of experts you may change: ask their team.")
        try:
            created = _decide(request, event, expert)
        except ReviewError as exc:
            form.add_error("expert" if expert is not None else None, str(exc))
            form.auto_id = f"id_%s_{event.pk}"
            return render(request, self.template_name, _review_context(request, {request_id: form}), status=400)
        same = 0
        for other in _ids(str(request.POST.get("also", ""))):  # the same question asked again: one decision for all
            try:
                same += _label_one(request, other, expert)
            except ReviewError:
                break
        times = f" (and {same} more time{'s' if same != 1 else ''} it was asked)" if same else ""
        if not created:
            messages.info(request, "That question was already reviewed; the first decision stands.")
        elif expert is None:
            messages.success(request, f"Dismissed{times}.")
        else:
            messages.success(request, f"Labelled for {expert.name}{times}: the next router training learns from it.")
        return redirect("console-review")

    def _bulk(self, request: HttpRequest) -> HttpResponse:
        """Label every selected question (each group of identical ones) with one expert."""
        ids = [i for value in request.POST.getlist("selected") for i in _ids(value)]
        slug = str(request.POST.get("expert", ""))
        if not ids or slug not in {s for s, _ in _review_choices(request.user)}:
            messages.error(request, "Select questions, and the expert that should answer them." if not ids else "Choose one of your experts.")
            return redirect("console-review")
        expert = get_expert_or_404(request.user, slug, edit=True)
        labelled = 0
        try:
            for request_id in ids:
                labelled += _label_one(request, request_id, expert)
        except ReviewError as exc:
            messages.error(request, f"{labelled} labelled, then: {exc}")
            return redirect("console-review")
        messages.success(request, f"Labelled {labelled} question{'s' if labelled != 1 else ''} for {expert.name}: the next router training learns from them.")
        return redirect("console-review")


class ReviewDecisionForm(forms.Form):
    """Label one queued question with its right expert, or dismiss it (``expert`` empty + ``dismiss``)."""

    request_id = forms.CharField(max_length=64, widget=forms.HiddenInput)
    expert = forms.ChoiceField(required=False, error_messages={"invalid_choice": "Pick one of the experts listed."})
    dismiss = forms.BooleanField(required=False)

    def __init__(self, *args: Any, experts: list[tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["expert"].choices = [("", "— choose the right expert —"), *(experts or [])]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("dismiss") and not data.get("expert"):
            self.add_error("expert", "Choose the expert that should have answered, or dismiss the question.")
        return data


def _review_choices(user: Any) -> list[tuple[str, str]]:
    """The experts ``user`` may label questions to: the active ones they may change."""
    experts = visible_experts(user).filter(status=ExpertStatus.ACTIVE, slug__in=access.editable_slugs(user)).order_by("name")
    return [(e.slug, f"{e.name} ({e.slug})") for e in experts]


def _review_context(request: HttpRequest, errors: dict[str, ReviewDecisionForm] | None = None) -> dict[str, Any]:
    items = review_queue(
        routing_selectors.event_slugs_for(request.user), min_score=settings.REVIEW_MIN_SCORE, min_margin=settings.REVIEW_MIN_MARGIN,
        days=settings.REVIEW_WINDOW_DAYS,
    )
    choices = _review_choices(request.user)
    errors = errors or {}
    rows = []
    for group in group_identical(items):
        item, others = group[0], group[1:]
        initial = {"request_id": item.event.request_id, "expert": item.suggested_expert}  # a wrong-expert report proposes its label
        form = errors.get(item.event.request_id) or ReviewDecisionForm(experts=choices, initial=initial, auto_id=f"id_%s_{item.event.pk}")
        rows.append({"item": item, "form": form, "count": len(group), "also": ",".join(o.event.request_id for o in others),
                     "ids": ",".join(g.event.request_id for g in group)})
    return {"rows": rows, "recent": recent_decisions(request.user), "min_score": settings.REVIEW_MIN_SCORE,
            "min_margin": settings.REVIEW_MIN_MARGIN, "days": settings.REVIEW_WINDOW_DAYS, "bulk_choices": choices}


def _reviewable_event(user: Any, request_id: str) -> RoutingEvent | None:
    """The request's (latest) event if ``user`` may see it in the review queue, else None."""
    event = RoutingEvent.objects.filter(request_id=request_id).order_by("-created_at", "-id").first()
    if event is None or not routing_selectors.event_is_visible(event, routing_selectors.event_slugs_for(user)):
        return None
    return event


def _may_dismiss(user: Any, event: RoutingEvent) -> bool:
    """Dismissing takes a question out of every team's queue: staff, or a user who may change an expert it belongs to."""
    return bool(user.is_staff or routing_selectors.event_experts(event) & access.editable_slugs(user))


def _label_one(request: HttpRequest, request_id: str, expert: Any) -> bool:
    """Record the decision on one queued request the user may review; whether one was made (False when it is not theirs)."""
    event = _reviewable_event(request.user, request_id)
    if event is None or (expert is None and not _may_dismiss(request.user, event)):
        return False
    return _decide(request, event, expert)


def _decide(request: HttpRequest, event: RoutingEvent, expert: Any) -> bool:
    """Label (or, with no expert, dismiss) ``event``'s question for the reason it is queued; False when it was decided already."""
    down = Feedback.objects.filter(request_id=event.request_id, rating=-1).exists()
    reasons, _, _ = review_reasons(event, down, settings.REVIEW_MIN_SCORE, settings.REVIEW_MIN_MARGIN)
    _, created = record_review_decision(event.request_id, event.question, primary_reason(reasons), event.expert, expert, user=request.user)
    return created


def _ids(value: str, limit: int = 500) -> list[str]:
    return [i.strip()[:64] for i in value.split(",") if i.strip()][:limit]


# --- reads ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReviewItem:
    """One served question waiting for a reviewer: why it is queued and what the router did."""

    event: RoutingEvent
    reasons: tuple[str, ...]
    top_score: float | None
    margin: float | None
    feedback_comment: str
    suggested_expert: str = ""  # who the user said should have answered ("wrong expert")
    earlier: str = ""  # the question asked just before it in its conversation ("" when none the reviewer may see)


def primary_reason(reasons: tuple[str, ...]) -> str:
    """The reason recorded with a decision: a thumbs-down wins, then abstention, then low confidence."""
    return next((r for r in ("thumbs_down", "abstained", "likely_misroute") if r in reasons), "low_confidence")


def _scores(event: RoutingEvent) -> list[float]:
    ranked = event.experts if isinstance(event.experts, list) else []
    scores = (as_number(e.get("score")) for e in ranked if isinstance(e, dict))
    return sorted((s for s in scores if s is not None), reverse=True)


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
    if not event.abstained and event.expert and _documents_point_elsewhere(event):
        reasons.append("likely_misroute")
    return tuple(reasons), top, margin


def _documents_point_elsewhere(event: RoutingEvent) -> bool:
    """Another candidate's documents match the question far better than the answering expert's (``routing.ml.knowledge.documents_disagree``)."""
    from routing.ml.knowledge import documents_disagree

    views = ((event.trace or {}).get("evidence") or {}).get("views") or {}
    evidence = views.get("knowledge")
    return isinstance(evidence, dict) and "unavailable" not in evidence and documents_disagree(evidence, event.expert) is not None


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
    return _with_earlier(items, visible)


def _with_earlier(items: list[ReviewItem], visible: set[str] | None) -> list[ReviewItem]:
    """``items`` with the question asked just before each in its conversation, where its text is stored and the reviewer
    may see that turn (``event_is_visible``): "Is it possible to do it online?" says nothing without it. One query."""
    conversations = {item.event.conversation_id for item in items if item.event.conversation_id}
    if not conversations:
        return items
    turns: dict[str, list[RoutingEvent]] = {}
    for e in RoutingEvent.objects.filter(conversation_id__in=conversations).exclude(question="").order_by("created_at", "id"):
        turns.setdefault(e.conversation_id, []).append(e)
    out = []
    for item in items:
        asked = (item.event.created_at, item.event.pk)
        before = [e for e in turns.get(item.event.conversation_id, []) if (e.created_at, e.pk) < asked and event_is_visible(e, visible)]
        out.append(replace(item, earlier=before[-1].question) if before else item)
    return out


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
    """``items`` grouped by their question and the one asked before it (case and spacing ignored), in first-seen order:
    the same follow-up after another question asks something else. Without text each stands alone."""
    groups: dict[str, list[ReviewItem]] = {}
    for item in items:
        text = " ".join(item.event.question.lower().split())
        before = " ".join(item.earlier.lower().split())
        groups.setdefault(f"{text}\n{before}" if text else f"#{item.event.pk}", []).append(item)
    return list(groups.values())

