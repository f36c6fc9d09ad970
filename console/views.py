"""Console pages that span apps: the overview, the playground, the traffic heatmap, expert pages and the
review queue (full pages and htmx partials).

Every page that shows or changes an expert's data goes through ``experts.access``: an expert the
user may not see is a 404, an action they may not take a 403; staff see and do everything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.views import View
from django.views.generic import RedirectView, TemplateView

from console.templatetags.expert_names import expert_name
from experts import access
from experts import services as expert_services
from experts.access import can_edit, get_expert_or_404, visible_experts, visible_slugs
from experts.choices import ExpertStatus
from experts.generation import GenerationBusy
from experts.redaction import redactor_for
from jobs.views import shown, visible_jobs
from knowledge import selectors as knowledge_selectors
from labeling.proposals import ReviewError
from labeling.services import record_review_decision
from routing import selectors as routing_selectors
from routing.models import Feedback, RoutingEvent
from sbcommon.console import LoginRequiredMixin
from serving import chat, conversations, route, traces
from serving.sse import event_stream_response

from . import selectors
from .forms import PlaygroundForm, ReviewDecisionForm
from .nav import optional_url
from .traces import feedback_form

_CITATION = re.compile(r"\[(\d+)\]")
_TIMING_PARTS = (("embed_ms", "Embed"), ("route_ms", "Route"), ("retrieve_ms", "Retrieve"), ("generate_ms", "Generate"))


editable_slugs = access.editable_slugs  # the jobs pages take the rule as a function (routing/urls.py)


def visible_jobs_for(user: Any) -> Any:
    """The jobs ``user`` may see, by the jobs pages' rule (with the expert access rules filled in)."""
    return visible_jobs(user, visible_slugs)


def shown_jobs(user: Any, jobs: list[Any]) -> list[Any]:
    """``jobs`` as the jobs pages show them to ``user``: other teams' experts left out of their text."""
    redact = redactor_for(user)
    return [shown(job, redact) for job in jobs]


def alarm_threshold() -> float:
    return settings.ROUTER_ALARM_SHARE


class OverviewView(LoginRequiredMixin, TemplateView):
    """Traffic today and this week, the experts the user may see with their health, the router, jobs and alarms."""

    template_name = "console/overview.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = self.request.user
        router = routing_selectors.active_router()
        accuracy = routing_selectors.validation_accuracy(router)
        experts = list(visible_experts(user).order_by("name", "slug"))
        health = selectors.expert_health(experts, threshold=alarm_threshold(), min_requests=settings.LOAD_ALARM_MIN_REQUESTS)
        context.update(
            experts=health,
            active_count=sum(1 for h in health if h.expert.status == ExpertStatus.ACTIVE),
            traffic=selectors.traffic_summary(None if user.is_staff else {e.slug for e in experts}),
            router=router,
            router_accuracy=accuracy,
            router_accuracy_percent=None if accuracy is None else 100 * accuracy,
            running=shown_jobs(user, selectors.running_jobs(visible_jobs_for(user))),
            jobs=shown_jobs(user, list(visible_jobs_for(user)[:5])),
            alarms=selectors.open_alarms(None if user.is_staff else {e.slug for e in experts}),
            alarms_url=optional_url("console-alarms"),
            over=[h for h in health if h.over_threshold],
            threshold_percent=100 * alarm_threshold(),
        )
        return context


class ExpertsView(LoginRequiredMixin, RedirectView):
    """``/experts/``, an expert page's URL cut short: the experts are listed on the overview."""

    def get_redirect_url(self, *args: Any, **kwargs: Any) -> str:
        return reverse("console-overview") + "#experts"


def answer_html(text: str, citation_count: int) -> SafeString:
    """The answer text, escaped, with each ``[n]`` marker linked to its cited passage."""

    def link(match: re.Match[str]) -> str:
        n = int(match.group(1))
        if not 1 <= n <= citation_count:
            return match.group(0)
        return format_html('<a class="cite" href="#cite-{}">[{}]</a>', n, n)

    # Escape first, then add links: the markers survive escaping unchanged, so nothing unescaped is marked safe.
    return mark_safe(_CITATION.sub(link, str(escape(text))))


def _latency(timings: dict[str, float]) -> dict[str, Any]:
    parts = [{"key": key.removesuffix("_ms"), "label": label, "ms": float(timings.get(key, 0.0))} for key, label in _TIMING_PARTS]
    total = float(timings.get("total_ms") or sum(p["ms"] for p in parts))
    for p in parts:
        p["share"] = round(100 * p["ms"] / total, 1) if total > 0 else 0.0
    return {"parts": parts, "total_ms": total}


def _with_href(passage: dict[str, Any]) -> dict[str, Any]:
    # Source URLs come from ingested documents: only web links become clickable (no ``javascript:``).
    url = str(passage.get("url") or "")
    return {**passage, "href": url if url.startswith(("https://", "http://")) else ""}


_SOURCE_LABELS = {"model": "model", "extractive": "extractive", "extractive_fallback": "extractive fallback",
                  "not_found": "nothing found", "none": "no expert"}


def _fallback_note(result: chat.ChatResult) -> str:
    """What the playground says when the model did not answer as configured."""
    reason = result.fallback_reason.replace("_", " ")
    if result.answer_source == "extractive_fallback":
        return f"The model could not answer ({reason}): these are the passages' best sentences."
    if result.answer_source == "model" and reason:
        which = f"adapter {result.adapter}" if result.adapter else "the base model without an adapter"
        return f"The expert's adapter could not be used ({reason}): {which} answered."
    if result.finish_reason == "time_budget":
        return "The answer was cut at its time budget."
    return ""


def _conversation_refused(form: PlaygroundForm) -> dict[str, Any]:
    form.add_error(None, "This conversation belongs to an API key and cannot be continued here; start a new one.")
    return {"form": form}


def _result_context(result: chat.ChatResult, form: PlaygroundForm | None = None) -> dict[str, Any]:
    """The answer panel's context; with the form, the conversation a follow-up continues (its id and questions so far)."""
    follow_up = {}
    if form is not None and result.conversation_id:
        asked = [*(form.cleaned_data.get("earlier") or []), form.cleaned_data["question"].strip()]
        follow_up = {"conversation_id": result.conversation_id, "earlier": "\n".join(asked[-conversations.CONTEXT_TURNS :]),
                     "earlier_count": len(asked)}
    ranked = [{"slug": str(e["slug"]), "score": float(e["score"]), "percent": round(100 * float(e["score"]), 1), "chosen": str(e["slug"]) == result.expert}
              for e in result.decision.experts]
    return {
        "source_label": _SOURCE_LABELS.get(result.answer_source, result.answer_source),
        "evidence": traces.routing_evidence(result.decision),
        "fallback_note": _fallback_note(result),
        "result": result,
        "ranked": ranked,
        "answer_html": answer_html(result.answer, len(result.citations)),
        "latency": _latency(result.timings),
        "citations": [_with_href(c) for c in result.citations],
        "passages": [_with_href(p) for p in result.passages],
        "follow_up": follow_up,
    }


def _refusal(form: PlaygroundForm, exc: Exception) -> tuple[dict[str, Any], int]:
    """The panel's context for a question that cannot be answered now (HTTP 503)."""
    if isinstance(exc, route.RoutingUnavailable):
        return {"form": form, "unavailable": str(exc)}, 503
    if isinstance(exc, GenerationBusy):
        return {"form": form, "busy_retry_s": exc.retry_after_s}, 503
    if isinstance(exc, route.ExpertNotAllowed):  # none of the router's experts is one this user may ask
        return {"form": form, "unavailable": str(exc)}, 403
    return {"form": form, "experts_down": str(exc)}, 503


_REFUSED = (route.RoutingUnavailable, route.AllExpertsDown, GenerationBusy, route.ExpertNotAllowed)


def _handle_question(request: HttpRequest) -> tuple[dict[str, Any], int]:
    """Validate the posted form and answer it: the template context and the HTTP status."""
    form = PlaygroundForm(request.POST, user=request.user)
    if not form.is_valid():
        return {"form": form}, 400
    try:
        result = chat.answer(**form.ask())
    except conversations.ConversationNotAllowed:
        return _conversation_refused(form), 400
    except _REFUSED as exc:
        return _refusal(form, exc)
    return {"form": form, **_result_context(result, form), "feedback_form": feedback_form(request.user)}, 200


class PlaygroundView(LoginRequiredMixin, View):
    """The playground page; a plain POST (no JavaScript) answers and renders the whole page."""

    template_name = "console/playground.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, self.template_name, {"form": PlaygroundForm(user=request.user)})

    def post(self, request: HttpRequest) -> HttpResponse:
        context, status = _handle_question(request)
        return render(request, self.template_name, context, status=status)


class PlaygroundAnswerView(LoginRequiredMixin, View):
    """The htmx endpoint: the playground panel (form and answer) alone."""

    template_name = "console/partials/playground_panel.html"

    def post(self, request: HttpRequest) -> HttpResponse:
        context, status = _handle_question(request)
        return render(request, self.template_name, context, status=status)


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class PlaygroundStreamView(LoginRequiredMixin, View):
    """The playground's answer as it is written (``js/playground.js``): server-sent events.

    ``meta`` (who answers), ``delta`` (text as the model writes it), then ``done`` with the whole
    panel rendered as the htmx endpoint renders it (citations, routing path, latency), or
    ``error`` when the model failed mid-answer. A question that cannot be answered is the panel
    itself as HTML (400 for form errors, 503 when routing, every expert or the model is unavailable).
    """

    template_name = "console/partials/playground_panel.html"

    def post(self, request: HttpRequest) -> HttpResponse:
        form = PlaygroundForm(request.POST, user=request.user)
        if not form.is_valid():
            return render(request, self.template_name, {"form": form}, status=400)
        try:
            turn = chat.open_stream(**form.ask())
        except conversations.ConversationNotAllowed:
            return render(request, self.template_name, _conversation_refused(form), status=400)
        except _REFUSED as exc:
            context, status = _refusal(form, exc)
            response = render(request, self.template_name, context, status=status)
            if isinstance(exc, GenerationBusy):
                response["Retry-After"] = str(exc.retry_after_s)
            return response
        return event_stream_response(request, self._events(request, form, turn), turn.close)

    def _events(self, request: HttpRequest, form: PlaygroundForm, turn: Any) -> Iterator[bytes]:
        names = access.visible_names(request.user)  # read once: for this first line and the panel at the end
        yield _event("meta", {"expert": turn.expert, "expert_name": expert_name(turn.expert, names), "answer_source": turn.source.answer_source})
        try:
            for delta in turn:
                yield _event("delta", {"text": delta})
        except route.StreamInterrupted as exc:
            yield _event("error", {"message": str(exc)})
            return
        html = render_to_string(self.template_name, {"form": form, **_result_context(turn.result, form), "feedback_form": feedback_form(request.user),
                                                     "expert_names": names}, request=request)
        yield _event("done", {"html": html})


# --- traffic heatmap -----------------------------------------------------------------------------

def _heatmap_for(request: HttpRequest) -> selectors.Heatmap:
    """The heatmap of the window asked for, limited to the experts the user may see (shares stay of all traffic)."""
    heatmap = selectors.traffic_heatmap(request.GET.get("window", selectors.DEFAULT_HEATMAP_WINDOW), threshold=alarm_threshold(),
                                       min_requests=settings.LOAD_ALARM_MIN_REQUESTS)
    return heatmap if request.user.is_staff else selectors.filter_heatmap(heatmap, visible_slugs(request.user))


def _confusion_for(request: HttpRequest, heatmap: selectors.Heatmap) -> dict[str, Any]:
    visible = None if request.user.is_staff else visible_slugs(request.user)
    return selectors.review_confusion(since=heatmap.buckets[0], visible=visible)


class HeatmapView(LoginRequiredMixin, TemplateView):
    """Requests per expert and time bucket, each expert's share against its fair share, the alarm, and
    the router's choice against reviewers' labels. The charts draw from ``console-heatmap-data``."""

    template_name = "console/heatmap.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        heatmap = _heatmap_for(self.request)
        context.update(
            heatmap=heatmap,
            windows=[(key, label) for key, (label, _, _) in selectors.HEATMAP_WINDOWS.items()],
            over=[row for row in heatmap.rows if row.over_threshold],
            confusion=_confusion_for(self.request, heatmap),
        )
        return context


class HeatmapDataView(LoginRequiredMixin, View):
    """The heatmap and the review confusion as JSON (what the page's charts fetch)."""

    def get(self, request: HttpRequest) -> JsonResponse:
        heatmap = _heatmap_for(request)
        return JsonResponse({**selectors.heatmap_json(heatmap), "confusion": _confusion_for(request, heatmap)})


# --- expert page ---------------------------------------------------------------------------------

class ExpertView(LoginRequiredMixin, View):
    """One expert for its team: description, versions, knowledge base, traffic, recent questions, misroutes."""

    template_name = "console/expert.html"

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug)
        traffic = selectors.daily_traffic(expert.slug)
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
            "questions": selectors.recent_questions(expert.slug),
            "misroutes": selectors.misroutes(expert.slug),
            "circuit": selectors.circuit_states([expert.slug])[expert.slug],
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


# --- review queue --------------------------------------------------------------------------------
#
# Who may review what: a user sees a queued question when they may see its event
# (``routing.selectors.visible_events``); they may label it only to an active expert they may change
# (``access.can_edit``), and dismiss it only when they may change one of the experts it belongs to
# (``routing.selectors.event_experts``: the one that answered it, or its candidates). Staff do everything.

def _review_choices(user: Any) -> list[tuple[str, str]]:
    """The experts ``user`` may label questions to: the active ones they may change."""
    experts = visible_experts(user).filter(status=ExpertStatus.ACTIVE, slug__in=access.editable_slugs(user)).order_by("name")
    return [(e.slug, f"{e.name} ({e.slug})") for e in experts]


def _review_context(request: HttpRequest, errors: dict[str, ReviewDecisionForm] | None = None) -> dict[str, Any]:
    items = selectors.review_queue(
        routing_selectors.event_slugs_for(request.user), min_score=settings.REVIEW_MIN_SCORE, min_margin=settings.REVIEW_MIN_MARGIN,
        days=settings.REVIEW_WINDOW_DAYS,
    )
    choices = _review_choices(request.user)
    errors = errors or {}
    rows = []
    for group in selectors.group_identical(items):
        item, others = group[0], group[1:]
        initial = {"request_id": item.event.request_id, "expert": item.suggested_expert}  # a wrong-expert report proposes its label
        form = errors.get(item.event.request_id) or ReviewDecisionForm(experts=choices, initial=initial, auto_id=f"id_%s_{item.event.pk}")
        rows.append({"item": item, "form": form, "count": len(group), "also": ",".join(o.event.request_id for o in others),
                     "ids": ",".join(g.event.request_id for g in group)})
    return {"rows": rows, "recent": selectors.recent_decisions(request.user), "min_score": settings.REVIEW_MIN_SCORE,
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


def _label_one(request: HttpRequest, request_id: str, expert: Any) -> tuple[bool, RoutingEvent | None]:
    """Record the decision on one queued request the user may review: (created, event); (False, None) when it is not theirs."""
    event = _reviewable_event(request.user, request_id)
    if event is None or (expert is None and not _may_dismiss(request.user, event)):
        return False, None
    down = Feedback.objects.filter(request_id=request_id, rating=-1).exists()
    reasons, _, _ = selectors.review_reasons(event, down, settings.REVIEW_MIN_SCORE, settings.REVIEW_MIN_MARGIN)
    _, created = record_review_decision(request_id, event.question, selectors.primary_reason(reasons), event.expert, expert, user=request.user)
    return created, event


def _ids(value: str, limit: int = 500) -> list[str]:
    return [i.strip()[:64] for i in value.split(",") if i.strip()][:limit]


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
        down = Feedback.objects.filter(request_id=request_id, rating=-1).exists()
        reasons, _, _ = selectors.review_reasons(event, down, settings.REVIEW_MIN_SCORE, settings.REVIEW_MIN_MARGIN)
        reason = selectors.primary_reason(reasons)
        try:
            _, created = record_review_decision(request_id, event.question, reason, event.expert, expert, user=request.user)
        except ReviewError as exc:
            form.add_error("expert" if expert is not None else None, str(exc))
            form.auto_id = f"id_%s_{event.pk}"
            return render(request, self.template_name, _review_context(request, {request_id: form}), status=400)
        same = 0
        for other in _ids(str(request.POST.get("also", ""))):  # the same question asked again: one decision for all
            try:
                same += _label_one(request, other, expert)[0]
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
                labelled += _label_one(request, request_id, expert)[0]
        except ReviewError as exc:
            messages.error(request, f"{labelled} labelled, then: {exc}")
            return redirect("console-review")
        messages.success(request, f"Labelled {labelled} question{'s' if labelled != 1 else ''} for {expert.name}: the next router training learns from them.")
        return redirect("console-review")
