"""Traces: every answered request as a page (question, router evidence, passages, answer, latency, arm, feedback).

A trace is a ``RoutingEvent`` and what it kept (``serving.traces``). A team member sees the traces
of the experts their teams can see, and those no expert answered that one of those experts was a
candidate for (``routing.selectors.visible_events``); retention (``routing.retention``) removes them
with their events.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.fields.json import KeyTransform
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views import View

from console.templatetags.expert_names import expert_name
from experts.access import visible_experts, visible_names, visible_slugs
from experts.choices import ExpertStatus
from routing import selectors as routing_selectors
from routing.models import Feedback, RoutingEvent
from sbcommon.console import LoginRequiredMixin
from serving import events
from serving.feedback import ResponseNotFound, UnknownExpert, record_feedback

PAGE_SIZE = 50
_PERIODS = {"1d": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}
_OUTCOMES = {"abstained": Q(abstained=True), "fallback": Q(answer_source="extractive_fallback"), "failed": ~Q(status_code=200)}
# The filters that are one lookup of their value.
_LOOKUPS = {"q": "question__icontains", "experiment": "experiment_id", "since": "created_at__gte", "until": "created_at__lt"}


class TraceFilterForm(forms.Form):
    """The trace list's filters (all optional; a bad value is reported beside its field)."""

    q = forms.CharField(required=False, max_length=200, label="Question contains")
    expert = forms.ChoiceField(required=False, label="Answered by")
    period = forms.ChoiceField(required=False, label="When", choices=[("", "Any time"), ("1d", "Last 24 hours"), ("7d", "Last 7 days"), ("30d", "Last 30 days")])
    outcome = forms.ChoiceField(required=False, label="Outcome", choices=[
        ("", "Any"), ("abstained", "No expert was sure"), ("fallback", "Extractive fallback"), ("failed", "Failed (not 200)"),
    ])
    feedback = forms.ChoiceField(required=False, label="Feedback", choices=[("", "Any"), ("down", "Thumbs down"), ("up", "Thumbs up"), ("none", "None")])
    experiment = forms.IntegerField(required=False, min_value=1, label="Experiment #")
    since = forms.DateTimeField(required=False, widget=forms.HiddenInput)  # a heatmap cell's time span
    until = forms.DateTimeField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, experts: list[tuple[str, str]], **kwargs: Any):
        """``experts``: (slug, display name) of each expert the user may filter by."""
        super().__init__(*args, **kwargs)
        self.fields["expert"].choices = [("", "Any expert"), *experts, ("-", "No expert")]


class TraceFeedbackForm(forms.Form):
    """A verdict on one answer from the console: helpful or not, or "wrong expert" with the right one."""

    verdict = forms.ChoiceField(choices=[("up", "Helpful"), ("down", "Not helpful"), ("wrong_expert", "Wrong expert")])
    right_expert = forms.ChoiceField(required=False, label="It should have gone to")
    comment = forms.CharField(required=False, max_length=2000, widget=forms.TextInput(attrs={"placeholder": "What was wrong? (optional)"}))

    def __init__(self, *args: Any, experts: list[tuple[str, str]], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["right_expert"].choices = [("", "choose the right expert"), *experts]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("verdict") == "wrong_expert" and not data.get("right_expert"):
            self.add_error("right_expert", "Choose the expert that should have answered.")
        return data


def feedback_form(user: Any, **kwargs: Any) -> TraceFeedbackForm:
    choices = [(e.slug, e.name) for e in visible_experts(user).filter(status=ExpertStatus.ACTIVE).order_by("name")]
    return TraceFeedbackForm(experts=choices, **kwargs)


def visible_event(user: Any, request_id: str) -> RoutingEvent:
    """The request's event, if ``user`` may see it (else 404).

    Events are written in batches: an answer given a moment ago (the playground's "Open the trace")
    may still be in this process's buffer, so it is flushed first.
    """
    events.flush()
    event = routing_selectors.visible_events(user).filter(request_id=request_id).order_by("-created_at").first()
    if event is None:
        raise Http404("no such request, or not one of your teams' experts")
    return event


def filtered(events: QuerySet[RoutingEvent], data: dict[str, Any]) -> QuerySet[RoutingEvent]:
    """``events`` narrowed by a valid ``TraceFilterForm``'s cleaned data, newest first, with their feedback."""
    events = events.filter(**{lookup: data[key] for key, lookup in _LOOKUPS.items() if data.get(key)})
    if data.get("expert") == "-":
        events = events.filter(expert="")
    elif data.get("expert"):
        events = events.filter(expert=data["expert"])
    if data.get("period") in _PERIODS:
        events = events.filter(created_at__gte=timezone.now() - _PERIODS[data["period"]])
    if data.get("outcome") in _OUTCOMES:
        events = events.filter(_OUTCOMES[data["outcome"]])
    rated = Feedback.objects.filter(request_id=OuterRef("request_id"))
    feedback = {"down": Exists(rated.filter(rating=-1)), "up": Exists(rated.filter(rating=1)), "none": ~Exists(rated)}.get(data.get("feedback"))
    if feedback is not None:
        events = events.filter(feedback)
    return events.order_by("-created_at", "-id")


class TraceListView(LoginRequiredMixin, View):
    """``/traces/``: the request log, searchable and filtered, 50 a page."""

    template_name = "console/traces.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        names = visible_names(request.user)
        form = TraceFilterForm(request.GET or None, experts=sorted(names.items(), key=lambda item: item[1].lower()))
        events = routing_selectors.visible_events(request.user)
        status = 200
        if form.is_bound and not form.is_valid():
            status, events = 400, events.none()
        elif form.is_bound:
            events = filtered(events, form.cleaned_data)
        else:
            events = events.order_by("-created_at", "-id")
        page = Paginator(events.only(
            "request_id", "created_at", "question", "expert", "abstained", "answer_source", "status_code", "total_ms", "experts", "arm",
        ).annotate(  # a two-expert answer's experts and the router's probabilities, read from the trace in the database: not every row's whole trace
            experts_answering=KeyTransform("experts_answering", "trace"), router_scores=KeyTransform("scores", "trace"),
        ), PAGE_SIZE).get_page(request.GET.get("page"))
        ratings = dict(Feedback.objects.filter(request_id__in=[e.request_id for e in page]).values_list("request_id", "rating"))
        rows = [{"event": e, "rating": ratings.get(e.request_id), "answered_by": answered_by(e), **answering_score(e)} for e in page]
        query = request.GET.copy()
        query.pop("page", None)
        # ``expert_names`` as read for the filter: the context processor's own read is then never made.
        return render(request, self.template_name, {"form": form, "page": page, "rows": rows, "query": query.urlencode(), "expert_names": names},
                      status=status)


def answered_by(event: RoutingEvent) -> list[str]:
    """The slugs of the experts whose parts make up the answer: both of a two-expert answer (its trace's ``experts_answering``,
    annotated by the list's query), else the one that answered (none where no expert did)."""
    answering = getattr(event, "experts_answering", None)
    if isinstance(answering, list) and len(answering) > 1 and all(isinstance(slug, str) for slug in answering):
        return answering
    return [event.expert] if event.expert else []


def confidences(scores: Any, ranked: list[dict[str, Any]]) -> dict[str, float]:
    """Each expert's confidence: the router's probability that the question is that expert's, as the trace keeps it
    (``scores``, before the load penalty), else the ranking's score (an event recorded before traces kept it).

    The ranking (``RoutingEvent.experts``) holds the scores after the load penalty, which orders the experts: the trace
    page shows them apart, under that name; everywhere else confidence is this figure.
    """
    if isinstance(scores, dict) and scores:
        return {str(slug): float(score or 0.0) for slug, score in scores.items()}
    return {str(e.get("slug")): float(e.get("score") or 0.0) for e in ranked}


def ranking(event: RoutingEvent) -> list[dict[str, Any]]:
    """The router's final ranking of the event's experts, best first (after the load penalty and capacity limits)."""
    return [e for e in event.experts if isinstance(e, dict)] if isinstance(event.experts, list) else []


def answering_score(event: RoutingEvent) -> dict[str, Any]:
    """The router's confidence in the expert that answered (``top``, as the trace page gives it), and the expert's place in
    the ranking (``rank``, 1 = the router's first choice), as the traces list shows them; the first choice's confidence
    where no ranked expert answered."""
    ranked = ranking(event)
    confidence = confidences(getattr(event, "router_scores", None), ranked)
    for rank, e in enumerate(ranked, start=1):
        if event.expert and e.get("slug") == event.expert:
            return {"top": confidence.get(event.expert), "rank": rank, "rank_label": _ORDINALS.get(rank, f"no. {rank}"), "first": ranked[0].get("slug")}
    return {"top": confidence.get(str(ranked[0].get("slug"))) if ranked else None, "rank": None, "rank_label": "", "first": None}


_ORDINALS = {2: "second", 3: "third"}


class TraceDetailView(LoginRequiredMixin, View):
    """``/traces/<request id>/``: one request explained."""

    template_name = "console/trace.html"

    def get(self, request: HttpRequest, request_id: str) -> HttpResponse:
        event = visible_event(request.user, request_id)
        trace = event.trace if isinstance(event.trace, dict) else {}
        # Events recorded before traces existed keep only the router's ranking.
        ranked = ranking(event)
        scores = confidences(trace.get("scores"), ranked)
        best = max(scores.values(), default=0.0) or 1.0
        answering = trace.get("experts_answering") if isinstance(trace.get("experts_answering"), list) else []  # two experts' parts
        feedback = Feedback.objects.filter(request_id=request_id).first()
        suggested = feedback.suggested_expert if feedback is not None else ""
        if suggested and not request.user.is_staff and suggested not in visible_slugs(request.user):
            suggested = ""  # another team's label proposal for a question both teams may see stays theirs
        passages = [{"index": n, **p} for n, p in enumerate(trace.get("passages") or [], start=1) if isinstance(p, dict)]
        selection = trace.get("selection") if isinstance(trace.get("selection"), dict) else None
        marks = citation_marks(passages, selection, merged=len(answering) > 1)
        for p in passages:
            p["mark"] = marks.get(p.get("index"))
        if selection is not None:  # each quoted sentence's passage as the answer cites it ("cited as [1]")
            selection = {**selection, "quoted": [{**q, "mark": marks.get(q.get("passage"))} for q in selection.get("quoted") or [] if isinstance(q, dict)]}
        timings = [("Embedding", event.embed_ms), ("Routing", event.route_ms), ("Retrieval", event.retrieve_ms), ("Answer", event.generate_ms)]
        context = {
            "event": event,
            "evidence": trace.get("evidence") or {"routed": event.router_version is not None},
            "has_trace": bool(trace),
            "scores": [{"slug": s, "score": v, "percent": round(100 * v / best, 1), "chosen": s == event.expert or s in answering} for s, v in scores.items()],
            "passages": passages,
            "spelling": trace.get("spelling") if isinstance(trace.get("spelling"), dict) else None,
            "kept": trace.get("kept_by_conversation") if isinstance(trace.get("kept_by_conversation"), dict) else None,
            "earlier_turns_searched": trace.get("earlier_turns_searched") if isinstance(trace.get("earlier_turns_searched"), int) else 0,
            "earlier_turns_left_out": trace.get("earlier_turns_left_out") if isinstance(trace.get("earlier_turns_left_out"), int) else 0,
            "answer": trace.get("answer", ""),
            "selection": selection,
            "experts_answering": answering,
            "asked": trace.get("asked") if isinstance(trace.get("asked"), dict) else {},
            "clarify": trace.get("clarify") if isinstance(trace.get("clarify"), list) else [],
            "chosen_after_clarify": str(trace.get("chosen_after_clarify") or ""),
            "timings": [{"label": label, "ms": ms} for label, ms in timings],
            "feedback": feedback,
            "suggested_expert": suggested,
            "runner_up": {"slug": ranked[1].get("slug"), "score": scores.get(str(ranked[1].get("slug")))} if len(ranked) > 1 else None,
            "load_balanced": load_balanced(ranked, scores),
            "feedback_form": feedback_form(request.user),
        }
        return render(request, self.template_name, context)


def load_balanced(ranked: list[dict[str, Any]], confidence: dict[str, float]) -> list[dict[str, Any]]:
    """The ranking's scores after the load penalty, in the order the experts were tried, where any differs from its
    confidence (shown to 3 decimals); empty where the penalty changed nothing (or the event kept no confidences apart)."""
    rows = [{"slug": str(e.get("slug")), "score": float(e.get("score") or 0.0), "confidence": confidence.get(str(e.get("slug")))} for e in ranked]
    if all(row["confidence"] is None or round(row["score"], 3) == round(row["confidence"], 3) for row in rows):
        return []
    return rows


def citation_marks(passages: list[dict[str, Any]], selection: dict[str, Any] | None, *, merged: bool = False) -> dict[Any, int]:
    """The citation number the answer gives each cited passage, by the passage's place in the retrieval (its ``index``).

    A trace keeps each cited passage's mark (``cited_as``, ``serving.traces.build``). For a trace recorded before it did:
    the answer numbers its citations in the order it cites them, the trace lists passages in retrieval order: an extractive
    answer cites its best sentence's passage first ([1]), then the other passages it quotes in retrieval order
    (``experts.ml.extractive.extractive_answer``). A trace does not keep the order a model cited in, so where more than
    one passage is cited and no quoted sentence says which came first (or two experts' answers were merged and renumbered),
    no numbers are given rather than wrong ones.
    """
    stored = {p.get("index"): p["cited_as"] for p in passages if isinstance(p.get("cited_as"), int)}
    if stored:  # the trace keeps the mark the answer gave each passage (``serving.traces.build``)
        return stored
    cited = [p.get("index") for p in passages if p.get("cited") and isinstance(p.get("index"), int)]
    if len(cited) == 1:
        return {cited[0]: 1}
    quoted = [q for q in (selection or {}).get("quoted") or [] if isinstance(q, dict)]
    if merged or not cited or not quoted or quoted[0].get("passage") not in cited:
        return {}
    lead = quoted[0]["passage"]
    return {index: mark for mark, index in enumerate([lead, *sorted(i for i in cited if i != lead)], start=1)}


class TraceFeedbackView(LoginRequiredMixin, View):
    """POST ``/traces/<request id>/feedback/``: helpful, not helpful, or wrong expert (proposed in the review queue)."""

    def post(self, request: HttpRequest, request_id: str) -> HttpResponse:
        event = visible_event(request.user, request_id)
        form = feedback_form(request.user, data=request.POST)
        back = request.POST.get("next") if str(request.POST.get("next", "")).startswith("/") else ""
        if not form.is_valid():
            for field, errors in form.errors.items():
                messages.error(request, f"{form.fields[field].label or field}: {' '.join(errors)}" if field != "__all__" else " ".join(errors))
            return redirect(back) if back else redirect("console-trace", request_id=request_id)
        data = form.cleaned_data
        wrong = data["verdict"] == "wrong_expert"
        try:
            # The page checked that this user may see the response (visible_event); the verdict is the team's, not the asker's.
            record_feedback(request_id, 1 if data["verdict"] == "up" else -1, data["comment"], event.api_key_id,
                            suggested_expert=data["right_expert"] if wrong else "", user_id=request.user.pk, check_owner=False,
                            allowed=visible_slugs(request.user))
        except (ResponseNotFound, UnknownExpert) as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Reported: it should have gone to {expert_name(data['right_expert'], visible_names(request.user))}. The review queue proposes that label."
                             if wrong else "Thanks: your verdict is recorded.")
        return redirect(back) if back else redirect("console-trace", request_id=request_id)
