"""Console pages: the overview, the playground, the traffic heatmap and training runs (full pages and htmx partials)."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.views import View
from django.views.generic import TemplateView

from experts.choices import ExpertStatus
from jobs.views import LoginRequiredMixin

from . import selectors, services
from .forms import PlaygroundForm
from .models import TrainingRun

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


# --- traffic heatmap -----------------------------------------------------------------------------

class HeatmapView(LoginRequiredMixin, TemplateView):
    """Requests per expert and time bucket, each expert's share against its fair share, and the alarm."""

    template_name = "routing/heatmap.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        threshold = float(getattr(settings, "ROUTER_ALARM_SHARE", 0.45))
        heatmap = selectors.traffic_heatmap(self.request.GET.get("window", selectors.DEFAULT_HEATMAP_WINDOW), threshold=threshold)
        context.update(
            heatmap=heatmap,
            windows=[(key, label) for key, (label, _, _) in selectors.HEATMAP_WINDOWS.items()],
            over=[row for row in heatmap.rows if row.over_threshold],
        )
        return context


# --- training runs -------------------------------------------------------------------------------

CHART_WIDTH, CHART_HEIGHT, CHART_PAD = 560, 200, 32


def line_chart(series: dict[str, list[tuple[float, float | None]]], width: int = CHART_WIDTH, height: int = CHART_HEIGHT) -> dict[str, Any]:
    """SVG geometry for a few series of (x, y) points sharing one scale; gaps (``None``) are skipped.

    Returns the ``points`` attribute of each series' polyline, the axis bounds and tick positions, so the
    template draws the chart with no JavaScript and no chart library.
    """
    points = [(x, y) for values in series.values() for x, y in values if y is not None]
    if not points:
        return {"lines": [], "empty": True, "width": width, "height": height}
    x_min, x_max = min(p[0] for p in points), max(p[0] for p in points)
    y_min, y_max = min(0.0, min(p[1] for p in points)), max(p[1] for p in points)
    x_span, y_span = (x_max - x_min) or 1.0, (y_max - y_min) or 1.0
    inner_w, inner_h = width - 2 * CHART_PAD, height - 2 * CHART_PAD

    def sx(x: float) -> float:
        return round(CHART_PAD + inner_w * (x - x_min) / x_span, 1)

    def sy(y: float) -> float:
        return round(CHART_PAD + inner_h * (1 - (y - y_min) / y_span), 1)

    lines = [
        {"name": name, "points": " ".join(f"{sx(x)},{sy(y)}" for x, y in values if y is not None)}
        for name, values in series.items()
    ]
    return {
        "lines": [line for line in lines if line["points"]], "empty": False, "width": width, "height": height,
        "left": CHART_PAD, "right": width - CHART_PAD, "top": CHART_PAD, "bottom": height - CHART_PAD,
        "x_min": x_min, "x_max": x_max, "y_min": y_min, "y_max": y_max, "y_mid": (y_min + y_max) / 2, "y_mid_at": sy((y_min + y_max) / 2),
    }


def _confusion(metrics: dict[str, Any], version_experts: list[str]) -> dict[str, Any] | None:
    """The stored validation confusion matrix with expert names, if present and well formed."""
    diagnostics = metrics.get("diagnostics") if isinstance(metrics.get("diagnostics"), dict) else {}
    matrix = diagnostics.get("confusion")
    if not isinstance(matrix, list) or not matrix or not all(isinstance(r, list) and len(r) == len(matrix) for r in matrix):
        return None
    # JSON object key order is not kept by every database, so names come from the version's ordered list.
    slugs = version_experts if len(version_experts) == len(matrix) else [str(i) for i in range(len(matrix))]
    names = selectors.expert_names(slugs)
    labels = [names.get(s, s) for s in slugs]
    return {"labels": labels, "rows": [{"label": label, "cells": [{"n": n, "diagonal": i == j} for j, n in enumerate(row)]} for i, (label, row) in enumerate(zip(labels, matrix, strict=True))]}


_DIAGNOSTIC_FACTS = (
    ("ece", "ECE"), ("ece_calibrated", "ECE after temperature scaling"), ("temperature", "Temperature"),
    ("load_cv", "Load CV (validation top-1)"), ("nll", "NLL"), ("nll_calibrated", "NLL after temperature scaling"),
)


def training_detail_context(run: TrainingRun) -> dict[str, Any]:
    """Everything the training run page shows, read defensively from the run's stored JSON."""
    row = selectors.training_run_row(run)
    history = selectors.training_history(run)
    metrics = run.metrics if isinstance(run.metrics, dict) else {}
    diagnostics = metrics.get("diagnostics") if isinstance(metrics.get("diagnostics"), dict) else {}
    val = metrics.get("val") if isinstance(metrics.get("val"), dict) else {}
    per_expert = diagnostics.get("per_expert") if isinstance(diagnostics.get("per_expert"), dict) else {}
    version_experts = [str(s) for s in (run.router_version.experts or [])] if run.router_version and isinstance(run.router_version.experts, list) else []
    names = selectors.expert_names(version_experts + list(per_expert))
    return {
        "row": row,
        "run": run,
        "history": history,
        "loss_chart": line_chart({
            "train_loss": [(h["epoch"], h["train_loss"]) for h in history],
            "val_loss": [(h["epoch"], h["val_loss"]) for h in history],
        }),
        "accuracy_chart": line_chart({"val_accuracy": [(h["epoch"], h["val_accuracy"]) for h in history]}),
        "params": sorted((run.params or {}).items()) if isinstance(run.params, dict) else [],
        "val_metrics": sorted((k, v) for k, v in val.items() if isinstance(v, int | float) and not isinstance(v, bool)),
        "diagnostic_facts": [(label, diagnostics[key]) for key, label in _DIAGNOSTIC_FACTS if isinstance(diagnostics.get(key), int | float)],
        "per_expert": [
            {"slug": slug, "name": names.get(slug, slug), **{k: v for k, v in values.items() if k in ("precision", "recall", "f1", "support")}}
            for slug, values in per_expert.items() if isinstance(values, dict)
        ],
        "undecided": [str(s) for s in diagnostics.get("undecided") or [] if isinstance(s, str)],
        "confusion": _confusion(metrics, version_experts),
        "active_router": selectors.active_router(),
    }


class TrainingListView(LoginRequiredMixin, TemplateView):
    """Every training run: its router version, parameters and validation scores."""

    template_name = "routing/training_list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["runs"] = selectors.training_runs()
        return context


class TrainingRunView(LoginRequiredMixin, View):
    """One training run: curves (inline SVG and a table), metrics, diagnostics and activation (staff only)."""

    template_name = "routing/training_run.html"

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        run = get_object_or_404(TrainingRun.objects.select_related("router_version"), pk=pk)
        return render(request, self.template_name, training_detail_context(run))


class TrainingRunActivateView(LoginRequiredMixin, View):
    """Make the run's router version the serving one; the posted form must carry the confirmation box."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff users may activate a router version.")
        run = get_object_or_404(TrainingRun.objects.select_related("router_version"), pk=pk)
        if run.router_version is None:
            context = {**training_detail_context(run), "activate_error": "This run produced no router version."}
            return render(request, TrainingRunView.template_name, context, status=400)
        if request.POST.get("confirm") != "yes":
            context = {**training_detail_context(run), "activate_error": "Tick the box to confirm the switch."}
            return render(request, TrainingRunView.template_name, context, status=400)
        version = services.activate_version(run.router_version)
        messages.success(request, f"Router v{version.version} now serves requests.")
        return redirect("console-training-run", pk=run.pk)
