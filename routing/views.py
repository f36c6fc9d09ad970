"""Console pages: the overview, the playground, the traffic heatmap, expert pages, the review queue and
training runs (full pages and htmx partials).

Every page that shows or changes an expert's data goes through ``experts.access``: an expert the
user may not see is a 404, an action they may not take a 403; staff see and do everything.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.views import View
from django.views.generic import TemplateView

from experts import access
from experts.access import can_edit, get_expert_or_404, visible_experts, visible_slugs
from experts.choices import ExpertStatus
from jobs.models import Job
from jobs.services import enqueue_once
from jobs.views import LoginRequiredMixin, visible_jobs
from knowledge import selectors as knowledge_selectors
from labeling.services import ReviewError, record_review_decision

from . import selectors, services, tasks
from .forms import PlaygroundForm, ReviewDecisionForm, TrainRouterForm
from .models import Feedback, RoutingEvent, TrainingRun
from .nav import optional_url

_CITATION = re.compile(r"\[(\d+)\]")
_TIMING_PARTS = (("embed_ms", "Embed"), ("route_ms", "Route"), ("retrieve_ms", "Retrieve"), ("generate_ms", "Generate"))


editable_slugs = access.editable_slugs  # the jobs pages take the rule as a function (routing/urls.py)


def visible_jobs_for(user: Any) -> Any:
    """The jobs ``user`` may see, by the jobs pages' rule (with the expert access rules filled in)."""
    return visible_jobs(user, visible_slugs)


def alarm_threshold() -> float:
    return float(getattr(settings, "ROUTER_ALARM_SHARE", 0.45))


class OverviewView(LoginRequiredMixin, TemplateView):
    """Traffic today and this week, the experts the user may see with their health, the router, jobs and alarms."""

    template_name = "routing/overview.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = self.request.user
        router = selectors.active_router()
        accuracy = selectors.validation_accuracy(router)
        experts = list(visible_experts(user).order_by("name", "slug"))
        health = selectors.expert_health(experts, threshold=alarm_threshold())
        context.update(
            experts=health,
            active_count=sum(1 for h in health if h.expert.status == ExpertStatus.ACTIVE),
            traffic=selectors.traffic_summary(None if user.is_staff else {e.slug for e in experts}),
            router=router,
            router_accuracy=accuracy,
            router_accuracy_percent=None if accuracy is None else 100 * accuracy,
            running=selectors.running_jobs(visible_jobs_for(user)),
            jobs=list(visible_jobs_for(user)[:5]),
            alarms=selectors.open_alarms(None if user.is_staff else {e.slug for e in experts}),
            alarms_url=optional_url("console-alarms"),
            over=[h for h in health if h.over_threshold],
            threshold_percent=100 * alarm_threshold(),
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
    form = PlaygroundForm(request.POST, user=request.user)
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
        return render(request, self.template_name, {"form": PlaygroundForm(user=request.user)})

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

def _heatmap_for(request: HttpRequest) -> selectors.Heatmap:
    """The heatmap of the window asked for, limited to the experts the user may see (shares stay of all traffic)."""
    heatmap = selectors.traffic_heatmap(request.GET.get("window", selectors.DEFAULT_HEATMAP_WINDOW), threshold=alarm_threshold())
    return heatmap if request.user.is_staff else selectors.filter_heatmap(heatmap, visible_slugs(request.user))


def _confusion_for(request: HttpRequest, heatmap: selectors.Heatmap) -> dict[str, Any]:
    visible = None if request.user.is_staff else visible_slugs(request.user)
    return selectors.review_confusion(since=heatmap.buckets[0], visible=visible)


class HeatmapView(LoginRequiredMixin, TemplateView):
    """Requests per expert and time bucket, each expert's share against its fair share, the alarm, and
    the router's choice against reviewers' labels. The charts draw from ``console-heatmap-data``."""

    template_name = "routing/heatmap.html"

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

    template_name = "routing/expert.html"

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug)
        traffic = selectors.daily_traffic(expert.slug)
        busiest = max((n for _, n in traffic), default=0)
        context = {
            "expert": expert,
            "can_edit": can_edit(request.user, expert),
            "versions": list(expert.versions.order_by("-version")[:20]),
            "router": selectors.active_router(),
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


# --- review queue --------------------------------------------------------------------------------

def _review_choices(user: Any) -> list[tuple[str, str]]:
    return [(e.slug, f"{e.name} ({e.slug})") for e in visible_experts(user).filter(status=ExpertStatus.ACTIVE).order_by("name")]


def _review_context(request: HttpRequest, errors: dict[str, ReviewDecisionForm] | None = None) -> dict[str, Any]:
    items = selectors.review_queue(
        visible_slugs(request.user), min_score=settings.REVIEW_MIN_SCORE, min_margin=settings.REVIEW_MIN_MARGIN, days=settings.REVIEW_WINDOW_DAYS,
    )
    choices = _review_choices(request.user)
    errors = errors or {}
    rows = []
    for item in items:
        form = errors.get(item.event.request_id) or ReviewDecisionForm(experts=choices, initial={"request_id": item.event.request_id}, auto_id=f"id_%s_{item.event.pk}")
        rows.append({"item": item, "form": form})
    from labeling.models import ReviewDecision

    visible = visible_slugs(request.user)
    recent = [d for d in ReviewDecision.objects.select_related("expert", "user", "query")[:50]
              if request.user.is_staff or not d.routed_expert or d.routed_expert in visible][:15]
    return {"rows": rows, "recent": recent, "min_score": settings.REVIEW_MIN_SCORE, "min_margin": settings.REVIEW_MIN_MARGIN, "days": settings.REVIEW_WINDOW_DAYS}


class ReviewQueueView(LoginRequiredMixin, View):
    """Low-confidence, abstained and thumbs-down questions to label with the right expert.

    POST labels one: the question becomes router training data (``labeling.services.record_review_decision``);
    one decision per request id, so a double submit records one.
    """

    template_name = "routing/review.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, self.template_name, _review_context(request))

    def post(self, request: HttpRequest) -> HttpResponse:
        choices = _review_choices(request.user)
        form = ReviewDecisionForm(request.POST, experts=choices)
        request_id = str(request.POST.get("request_id", ""))[:64]
        event = RoutingEvent.objects.filter(request_id=request_id).order_by("-created_at").first()
        if event is None:
            raise Http404("no such request")
        if event.expert and event.expert not in visible_slugs(request.user):
            raise Http404("no such request")
        if not form.is_valid():
            form.auto_id = f"id_%s_{event.pk}"
            return render(request, self.template_name, _review_context(request, {request_id: form}), status=400)
        expert = None
        if not form.cleaned_data["dismiss"]:
            expert = get_expert_or_404(request.user, form.cleaned_data["expert"])
        down = Feedback.objects.filter(request_id=request_id, rating=-1).exists()
        reasons, _, _ = selectors.review_reasons(event, down, settings.REVIEW_MIN_SCORE, settings.REVIEW_MIN_MARGIN)
        reason = selectors.primary_reason(reasons)
        try:
            _, created = record_review_decision(request_id, event.question, reason, event.expert, expert, user=request.user)
        except ReviewError as exc:
            form.add_error("expert" if expert is not None else None, str(exc))
            form.auto_id = f"id_%s_{event.pk}"
            return render(request, self.template_name, _review_context(request, {request_id: form}), status=400)
        if not created:
            messages.info(request, "That question was already reviewed; the first decision stands.")
        elif expert is None:
            messages.success(request, "Dismissed.")
        else:
            messages.success(request, f"Labelled for {expert.name}: the next router training learns from it.")
        return redirect("console-review")


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
        "robustness": robustness_report(metrics.get("noise_report")),
        "serving_top_k": settings.ROUTER_TOP_K,
    }


_ROBUSTNESS_METHODS = (("router", "router (with noise injection)"), ("router_without_regulariser", "router without noise injection"), ("logreg", "logistic regression"), ("knn", "k-NN"))


def robustness_report(report: Any) -> dict[str, Any] | None:
    """The noise-injection robustness report (``evaluate router --noise-report``'s shape) as chart series and table rows.

    ``report["levels"]`` maps a label-noise level ("0.1") to each method's clean and typo-perturbed
    accuracy. Returns ``None`` when the run has no report or it is malformed.
    """
    levels = report.get("levels") if isinstance(report, dict) else None
    if not isinstance(levels, dict) or not levels:
        return None
    parsed = []
    for key, methods in levels.items():
        level = selectors._number(key)
        if level is not None and isinstance(methods, dict):
            parsed.append((level, methods))
    parsed.sort(key=lambda p: p[0])
    series: dict[str, list[tuple[float, float | None]]] = {}
    rows = []
    for method, label in _ROBUSTNESS_METHODS:
        clean = [(100 * level, selectors._number((m.get(method) or {}).get("accuracy"))) for level, m in parsed]
        typo = [(100 * level, selectors._number((m.get(method) or {}).get("typo_accuracy"))) for level, m in parsed]
        if not any(v is not None for _, v in clean + typo):
            continue
        series[f"{method} clean"] = clean
        series[f"{method} typos"] = typo
        rows.append({"label": label, "cells": [{"clean": c, "typo": t} for (_, c), (_, t) in zip(clean, typo, strict=True)]})
    if not rows:
        return None
    return {
        "levels": [100 * level for level, _ in parsed], "rows": rows, "chart": line_chart(series),
        "typo_rate": selectors._number(report.get("typo_rate")),
    }


def _training_list_context(form: TrainRouterForm | None = None) -> dict[str, Any]:
    return {
        "runs": selectors.training_runs(),
        "form": form or TrainRouterForm(),
        "training_jobs": list(Job.objects.filter(kind="train_router").order_by("-created_at", "-id")[:5]),
    }


class TrainingListView(LoginRequiredMixin, TemplateView):
    """Every training run: its router version, parameters and validation scores; the train form; compare two."""

    template_name = "routing/training_list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **_training_list_context()}


TRAIN_JOB_KEY = "train_router"


class TrainRouterView(LoginRequiredMixin, View):
    """POST (staff): start a router training with the form's parameters, then its job page.

    The job key is shared with every other router training (the demo's too), so a double submit,
    or a submit while a training runs, opens the running job instead of starting a second one.
    """

    def post(self, request: HttpRequest) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff users may train the router.")
        form = TrainRouterForm(request.POST)
        if not form.is_valid():
            return render(request, TrainingListView.template_name, _training_list_context(form), status=400)
        job = enqueue_once("train_router", TRAIN_JOB_KEY, "Train router", tasks.train_router, form.params(), user=request.user)
        return redirect("console-job", job.pk)


class TrainingCompareView(LoginRequiredMixin, View):
    """Two training runs side by side: parameters, validation metrics, diagnostics and curves."""

    template_name = "routing/training_compare.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        ids = []
        for key in ("a", "b"):
            try:
                ids.append(int(request.GET.get(key, "")))
            except ValueError:
                return render(request, self.template_name, {"error": "Pick two runs to compare.", "runs": selectors.training_runs()}, status=400)
        runs = {r.pk: r for r in TrainingRun.objects.select_related("router_version").filter(pk__in=ids)}
        if any(i not in runs for i in ids):
            raise Http404("no such training run")
        left, right = (training_detail_context(runs[i]) for i in ids)
        keys = sorted({k for k, _ in left["params"]} | {k for k, _ in right["params"]})
        lp, rp = dict(left["params"]), dict(right["params"])
        metric_keys = sorted({k for k, _ in left["val_metrics"]} | {k for k, _ in right["val_metrics"]})
        lm, rm = dict(left["val_metrics"]), dict(right["val_metrics"])
        return render(request, self.template_name, {
            "left": left, "right": right,
            "params": [{"key": k, "a": lp.get(k), "b": rp.get(k), "differs": lp.get(k) != rp.get(k)} for k in keys],
            "metrics": [{"key": k, "a": lm.get(k), "b": rm.get(k), "delta": (rm[k] - lm[k]) if k in lm and k in rm else None} for k in metric_keys],
            "runs": selectors.training_runs(),
        })


class TrainingRunView(LoginRequiredMixin, View):
    """One training run: curves (inline SVG and a table), metrics, diagnostics and activation (staff only)."""

    template_name = "routing/training_run.html"

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        run = get_object_or_404(TrainingRun.objects.select_related("router_version"), pk=pk)
        return render(request, self.template_name, training_detail_context(run))


def training_curves_json(run: TrainingRun) -> dict[str, Any]:
    """A run's per-epoch curves (and its robustness report's series) as JSON for the page's charts."""
    history = selectors.training_history(run)
    metrics = run.metrics if isinstance(run.metrics, dict) else {}
    report = robustness_report(metrics.get("noise_report"))
    robustness = None
    if report is not None:
        methods = {label: method for method, label in _ROBUSTNESS_METHODS}
        robustness = {
            "levels": report["levels"],
            "typo_rate": report["typo_rate"],
            "series": [
                {"method": methods[row["label"]], "label": row["label"], "kind": kind, "values": [cell[kind] for cell in row["cells"]]}
                for row in report["rows"] for kind in ("clean", "typo")
            ],
        }
    return {
        "run": run.pk,
        "epochs": [h["epoch"] for h in history],
        "series": {key: [h[key] for h in history] for key in ("train_loss", "val_loss", "val_accuracy")},
        "robustness": robustness,
    }


class TrainingCurvesView(LoginRequiredMixin, View):
    """GET: a run's loss and accuracy per epoch as JSON (what the run and compare pages' charts fetch)."""

    def get(self, request: HttpRequest, pk: int) -> JsonResponse:
        run = get_object_or_404(TrainingRun.objects.select_related("router_version"), pk=pk)
        return JsonResponse(training_curves_json(run))


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
