"""The playground: ask a question as the signed-in user and see who answered, from which passages, and how
long each step took; the answer whole (a plain POST, or the htmx panel) or streamed (server-sent events)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from django import forms
from django.conf import settings
from django.core.validators import MaxLengthValidator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.views import View

from console.templatetags.expert_names import expert_name
from experts import access
from experts.access import Principal, askable_slugs
from experts.generation import GenerationBusy
from experts.selectors import active_experts
from sbcommon.console import LoginRequiredMixin
from serving import chat, conversations, route, traces
from serving.sse import event_stream_response

from .traces import confidences, feedback_form


class PlaygroundForm(forms.Form):
    """A question and the mode to answer it in (``auto``, ``auto:fast`` or one expert's slug)."""

    question = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "How do I renew my driver's license?"}),
        error_messages={"required": "Please enter a question."},
    )
    mode = forms.ChoiceField(initial="auto")
    # A follow-up: the conversation the earlier answers belong to, and the questions asked in it (one a line,
    # the last ``CONTEXT_TURNS`` kept), which route and search the next question as an API client's messages do.
    conversation_id = forms.CharField(required=False, widget=forms.HiddenInput)
    earlier = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read at form creation, not import, so settings overrides in tests and deployments apply.
        limit = settings.MAX_QUESTION_CHARS
        question = self.fields["question"]
        question.validators.append(MaxLengthValidator(limit))
        question.widget.attrs["maxlength"] = str(limit)
        # The playground asks as its user, by the one access rule: the router, retrieval and the mode list see only what they may ask.
        self.principal = Principal(user=user)
        self.allowed = askable_slugs(self.principal)
        self.fields["mode"].choices = playground_modes(self.allowed)

    def clean_conversation_id(self) -> str:
        value = self.cleaned_data.get("conversation_id") or ""
        if value and not conversations.ID_PATTERN.match(value):
            raise forms.ValidationError("This conversation cannot be continued; start a new one.")
        return value

    def clean_earlier(self) -> list[str]:
        limit = settings.MAX_QUESTION_CHARS
        lines = [line.strip()[:limit] for line in (self.cleaned_data.get("earlier") or "").splitlines() if line.strip()]
        return lines[-conversations.CONTEXT_TURNS :]

    def next_question(self) -> PlaygroundForm:
        """The form under an answer: empty for the next question of the conversation, in the mode just used."""
        return PlaygroundForm(initial={"mode": self.cleaned_data["mode"]}, user=self.principal.user)

    def ask(self) -> dict[str, Any]:
        """The chat request's fields for the cleaned form: the question, the mode, the conversation so far, and who asks."""
        data = self.cleaned_data
        return {"question": data["question"], "model": data["mode"], "conversation_id": data.get("conversation_id") or "",
                "history": [{"role": "user", "content": q} for q in data.get("earlier") or []],
                "allowed": self.allowed, "user_id": self.principal.user_id}


def playground_modes(slugs: set[str] | None = None) -> list[tuple[str, str]]:
    """Choices for the playground's mode select: the router's modes, then each active expert (of ``slugs`` when given)."""
    modes = [("auto", "auto — top 2 experts"), ("auto:fast", "auto:fast — top expert only, light router")]
    experts = active_experts() if slugs is None else active_experts().filter(slug__in=slugs)
    modes += [(slug, f"{slug} — {name} (bypass router)") for slug, name in experts.order_by("slug").values_list("slug", "name")]
    return modes


class PlaygroundView(LoginRequiredMixin, View):
    """The playground page; a plain POST (no JavaScript) answers and renders the whole page."""

    template_name = "console/playground.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, self.template_name, {"form": PlaygroundForm(user=request.user)})

    def post(self, request: HttpRequest) -> HttpResponse:
        context, status = _handle_question(request)
        return render(request, self.template_name, context, status=status)


class PlaygroundAnswerView(PlaygroundView):
    """The htmx endpoint: the playground panel (form and answer) alone, as the page's POST answers it."""

    template_name = "console/partials/playground_panel.html"
    http_method_names = ["post", "options"]


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
        html = render_to_string(self.template_name, {**_result_context(turn.result, form), "feedback_form": feedback_form(request.user),
                                                     "expert_names": names}, request=request)
        yield _event("done", {"html": html})


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
    return {**_result_context(result, form), "feedback_form": feedback_form(request.user)}, 200


_REFUSED = (route.RoutingUnavailable, route.AllExpertsDown, GenerationBusy, route.ExpertNotAllowed)


def _refusal(form: PlaygroundForm, exc: Exception) -> tuple[dict[str, Any], int]:
    """The panel's context for a question that cannot be answered now (HTTP 503)."""
    if isinstance(exc, route.RoutingUnavailable):
        return {"form": form, "unavailable": str(exc)}, 503
    if isinstance(exc, GenerationBusy):
        return {"form": form, "busy_retry_s": exc.retry_after_s}, 503
    if isinstance(exc, route.ExpertNotAllowed):  # none of the router's experts is one this user may ask
        return {"form": form, "unavailable": str(exc)}, 403
    return {"form": form, "experts_down": str(exc)}, 503


def _conversation_refused(form: PlaygroundForm) -> dict[str, Any]:
    form.add_error(None, "This conversation belongs to an API key and cannot be continued here; start a new one.")
    return {"form": form}


def _result_context(result: chat.ChatResult, form: PlaygroundForm) -> dict[str, Any]:
    """The answer panel's context: the answer, the question it answers, and an empty form for the next question of the
    conversation it continues (its id and questions so far)."""
    question = form.cleaned_data["question"].strip()
    follow_up = {}
    if result.conversation_id:
        asked = [*(form.cleaned_data.get("earlier") or []), question]
        follow_up = {"conversation_id": result.conversation_id, "earlier": "\n".join(asked[-conversations.CONTEXT_TURNS :]),
                     "earlier_count": len(asked)}
    # Each expert's confidence (the router's probability, before the load penalty), as its trace gives it, in the order tried.
    confidence = confidences(result.decision.raw_scores, result.decision.experts)
    scores = {str(e["slug"]): confidence.get(str(e["slug"]), float(e["score"])) for e in result.decision.experts}
    ranked = [{"slug": slug, "score": score, "percent": round(100 * score, 1), "chosen": slug == result.expert} for slug, score in scores.items()]
    return {
        "form": form.next_question(),
        "asked_question": question,
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
        "clarify_question": question if result.clarify else "",
    }


_SOURCE_LABELS = {"model": "model", "extractive": "extractive", "extractive_fallback": "extractive fallback",
                  "not_found": "nothing found", "none": "no expert", "clarify": "question back", "courtesy": "polite reply"}


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


def answer_html(text: str, citation_count: int) -> SafeString:
    """The answer text, escaped, with each ``[n]`` marker linked to its cited passage."""

    def link(match: re.Match[str]) -> str:
        n = int(match.group(1))
        if not 1 <= n <= citation_count:
            return match.group(0)
        return format_html('<a class="cite" href="#cite-{}">[{}]</a>', n, n)

    # Escape first, then add links: the markers survive escaping unchanged, so nothing unescaped is marked safe.
    return mark_safe(_CITATION.sub(link, str(escape(text))))


_CITATION = re.compile(r"\[(\d+)\]")


_TIMING_PARTS = (("embed_ms", "Embed"), ("route_ms", "Route"), ("retrieve_ms", "Retrieve"), ("generate_ms", "Generate"))


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


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()

