"""Console pages: the overview and the playground (full pages and their htmx partials)."""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.views import View
from django.views.generic import TemplateView

from experts.choices import ExpertStatus
from jobs.views import LoginRequiredMixin

from . import selectors, services
from .forms import PlaygroundForm

_CITATION = re.compile(r"\[(\d+)\]")
_TIMING_PARTS = (("embed_ms", "Embed"), ("route_ms", "Route"), ("retrieve_ms", "Retrieve"), ("generate_ms", "Generate"))


class OverviewView(LoginRequiredMixin, TemplateView):
    template_name = "routing/overview.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        router = selectors.active_router()
        accuracy = selectors.validation_accuracy(router)
        experts = selectors.expert_rows()
        context.update(
            experts=experts,
            active_count=sum(1 for e in experts if e.status == ExpertStatus.ACTIVE),
            router=router,
            router_accuracy=accuracy,
            router_accuracy_percent=None if accuracy is None else 100 * accuracy,
            jobs=selectors.latest_jobs(5),
        )
        return context


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


def _result_context(result: services.ChatResult) -> dict[str, Any]:
    ranked = [{"slug": str(e["slug"]), "score": float(e["score"]), "percent": round(100 * float(e["score"]), 1)} for e in result.decision.experts]
    return {
        "result": result,
        "ranked": ranked,
        "answer_html": answer_html(result.answer, len(result.citations)),
        "latency": _latency(result.timings),
        "citations": [_with_href(c) for c in result.citations],
        "passages": [_with_href(p) for p in result.passages],
    }


def _handle_question(request: HttpRequest) -> tuple[dict[str, Any], int]:
    """Validate the posted form and answer it: the template context and the HTTP status."""
    form = PlaygroundForm(request.POST)
    if not form.is_valid():
        return {"form": form}, 400
    try:
        result = services.answer(form.cleaned_data["question"], model=form.cleaned_data["mode"])
    except services.RoutingUnavailable as exc:
        return {"form": form, "unavailable": str(exc)}, 503
    return {"form": form, **_result_context(result)}, 200


class PlaygroundView(LoginRequiredMixin, View):
    """The playground page; a plain POST (no JavaScript) answers and renders the whole page."""

    template_name = "routing/playground.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, self.template_name, {"form": PlaygroundForm()})

    def post(self, request: HttpRequest) -> HttpResponse:
        context, status = _handle_question(request)
        return render(request, self.template_name, context, status=status)


class PlaygroundAnswerView(LoginRequiredMixin, View):
    """The htmx endpoint: the playground panel (form and answer) alone."""

    template_name = "routing/partials/playground_panel.html"

    def post(self, request: HttpRequest) -> HttpResponse:
        context, status = _handle_question(request)
        return render(request, self.template_name, context, status=status)
