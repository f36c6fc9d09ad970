"""Console pages of router training: the run list, the train form, one run's curves and diagnostics,
comparing two runs, and activating a run's router.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View
from django.views.generic import TemplateView

from encoders import embedding_space, model_name
from experts import selectors as expert_selectors
from experts.redaction import hidden_slugs, redactor_for
from jobs.models import Job
from sbcommon.console import LoginRequiredMixin

from . import selectors, services
from .forms import TrainRouterForm
from .models import TrainingRun


def _chart(history: list[dict[str, Any]], *keys: str) -> dict[str, bool]:
    """What the chart include reads (Chart.js draws the curves from the JSON): whether any of ``keys`` has a number."""
    return {"empty": all(h[key] is None for h in history for key in keys)}


OTHER_EXPERTS = "Other teams' experts"


def _confusion(metrics: dict[str, Any], version_experts: list[str], hidden: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """The stored validation confusion matrix with expert names, if present and well formed.

    The rows and columns of the ``hidden`` experts (those a team member may not see) are added up into
    one "Other teams' experts" row and column: the counts stay whole, the names stay theirs.
    """
    diagnostics = metrics.get("diagnostics") if isinstance(metrics.get("diagnostics"), dict) else {}
    matrix = diagnostics.get("confusion")
    if not isinstance(matrix, list) or not matrix or not all(isinstance(r, list) and len(r) == len(matrix) for r in matrix):
        return None
    # JSON object key order is not kept by every database, so names come from the version's ordered list.
    slugs = version_experts if len(version_experts) == len(matrix) else [str(i) for i in range(len(matrix))]
    names = expert_selectors.expert_names(slugs)
    labels = [names.get(s, s) for s in slugs]
    if hidden & set(slugs):
        # Positions of the shown experts, then one for all the others; each cell adds up the cells it stands for.
        shown = [i for i, s in enumerate(slugs) if s not in hidden]
        groups = [[i] for i in shown] + [[i for i, s in enumerate(slugs) if s in hidden]]
        labels = [labels[i] for i in shown] + [OTHER_EXPERTS]
        matrix = [[sum(matrix[i][j] for i in rows for j in cols) for cols in groups] for rows in groups]
    return {"labels": labels, "rows": [{"label": label, "cells": [{"n": n, "diagonal": i == j} for j, n in enumerate(row)]} for i, (label, row) in enumerate(zip(labels, matrix, strict=True))]}


_DIAGNOSTIC_FACTS = (
    ("ece", "ECE"), ("ece_calibrated", "ECE after temperature scaling"), ("temperature", "Temperature"),
    ("load_cv", "Load CV (validation top-1)"), ("nll", "NLL"), ("nll_calibrated", "NLL after temperature scaling"),
)


def _spelling(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """What the character view (routing.ml.textrouter) brought, for a run trained with one."""
    view, typos = metrics.get("char_view"), metrics.get("typos")
    if not isinstance(view, dict):
        return None
    rate = selectors.as_number((typos or {}).get("rate")) if isinstance(typos, dict) else None
    return {"weight": selectors.as_number(view.get("weight")), "accuracy_typos": selectors.as_number(view.get("val_accuracy_typos")),
            "accuracy_clean": selectors.as_number(view.get("val_accuracy_clean")), "rate_percent": round(100 * rate) if rate is not None else None}


def _similar_questions(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """Whether the router's choice also reads the training questions most like the question (routing.ml.nearest)."""
    found = metrics.get("nearest")
    if not isinstance(found, dict):
        return None
    weight = selectors.as_number(found.get("weight")) or 0.0
    return {"used": weight > 0, "weight": weight, "bank": int(found.get("bank") or 0)}


def _out_of_scope(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """What the router compares a question with before it says no expert covers it (routing.ml.inscope)."""
    found = metrics.get("in_scope")
    if not isinstance(found, dict) or not isinstance(found.get("candidates"), list):
        return None
    mix, scale = selectors.as_number(found.get("nearest_mix")) or 0.0, selectors.as_number(found.get("char_scale")) or 0.0
    chosen = [c for c in found["candidates"] if isinstance(c, dict) and c.get("mix") == found.get("nearest_mix") and c.get("char_scale") == found.get("char_scale")]
    return {"summaries": mix < 1.0, "questions": int(found.get("bank") or 0) if mix > 0 else 0, "spelling": scale > 0,
            "auroc": selectors.as_number(chosen[0].get("auroc")) if chosen else None}


def _knowledge(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """Whether the experts' documents take part in routing for this run, and what validation said (routing.ml.knowledge)."""
    found = metrics.get("knowledge")
    if not isinstance(found, dict):
        return None
    # Runs trained before the in-scope part was decided apart from the ranking served it only when kept.
    in_scope = found.get("in_scope", found.get("kept"))
    return {"fitted": bool(found.get("fitted")), "kept": bool(found.get("kept")), "in_scope": bool(in_scope), "reason": str(found.get("reason") or ""),
            "accuracy_router": selectors.as_number(found.get("val_accuracy_router")), "accuracy_cv": selectors.as_number(found.get("val_accuracy_cv"))}


def _fast_tier(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The fast tier trained with this run (``auto:fast``'s router), against the full router on the same validation questions."""
    found = metrics.get("fast_tier")
    if not isinstance(found, dict):
        return None
    val = found.get("val") if isinstance(found.get("val"), dict) else {}
    distil = found.get("distil") if isinstance(found.get("distil"), dict) else {}
    full = metrics.get("val") if isinstance(metrics.get("val"), dict) else {}
    return {"trained": bool(found.get("trained")), "reason": str(found.get("reason") or ""), "accuracy": selectors.as_number(val.get("accuracy")),
            "accuracy_full": selectors.as_number(full.get("accuracy")), "cosine": selectors.as_number(distil.get("best_val_cosine"))}


def training_detail_context(run: TrainingRun, user: Any) -> dict[str, Any]:
    """Everything the training run page shows ``user``, read defensively from the run's stored JSON.

    A router is trained on every team's experts; a team member sees the per-expert figures of the
    experts they may see (``experts.access``) only, the other experts' confusion added up in one row
    and column, and any other expert named in its notes replaced (``experts.redaction``). Staff see all.
    """
    hidden = hidden_slugs(user)
    redact = redactor_for(user)
    row = selectors.training_run_row(run)
    history = selectors.training_history(run)
    metrics = run.metrics if isinstance(run.metrics, dict) else {}
    diagnostics = metrics.get("diagnostics") if isinstance(metrics.get("diagnostics"), dict) else {}
    val = metrics.get("val") if isinstance(metrics.get("val"), dict) else {}
    per_expert = diagnostics.get("per_expert") if isinstance(diagnostics.get("per_expert"), dict) else {}
    version_experts = [str(s) for s in (run.router_version.experts or [])] if run.router_version and isinstance(run.router_version.experts, list) else []
    names = expert_selectors.expert_names(version_experts + list(per_expert))
    return {
        "row": row,
        "run": run,
        "history": history,
        "loss_chart": _chart(history, "train_loss", "val_loss"),
        "accuracy_chart": _chart(history, "val_accuracy"),
        "params": sorted((run.params or {}).items()) if isinstance(run.params, dict) else [],
        "val_metrics": sorted((k, v) for k, v in val.items() if isinstance(v, int | float) and not isinstance(v, bool)),
        "diagnostic_facts": [(label, diagnostics[key]) for key, label in _DIAGNOSTIC_FACTS if isinstance(diagnostics.get(key), int | float)],
        "per_expert": [
            {"slug": slug, "name": names.get(slug, slug), **{k: v for k, v in values.items() if k in ("precision", "recall", "f1", "support")}}
            for slug, values in per_expert.items() if isinstance(values, dict) and slug not in hidden
        ],
        "undecided": [str(s) for s in diagnostics.get("undecided") or [] if isinstance(s, str) and s not in hidden],
        "confusion": _confusion(metrics, version_experts, hidden),
        "active_router": selectors.active_router(),
        "spelling": _spelling(metrics),
        # Their reasons are free text (an exception's message, say) that may name any expert.
        "knowledge": redact(_knowledge(metrics)),
        "out_of_scope": _out_of_scope(metrics),
        "similar_questions": _similar_questions(metrics),
        "fast_tier": redact(_fast_tier(metrics)),
        "serving_top_k": settings.ROUTER_TOP_K,
    }


def _training_list_context(form: TrainRouterForm | None = None) -> dict[str, Any]:
    active, space = selectors.active_router(), embedding_space()
    stale = active if active is not None and active.embedding_model != space else None
    return {
        # The live router was trained on another encoder's vectors (EMBEDDING_MODEL or an EMBEDDING_BACKEND of
        # another embedding space changed since): its routes are only right after a new training. Meanwhile
        # its fast tier routes where only the backend changed (serving.route), else the router as it is.
        "stale_router": stale,
        "stale_router_fast_tier": stale is not None and bool(((stale.metrics or {}).get("fast_tier") or {}).get("trained"))
                                  and model_name(stale.embedding_model) == model_name(space),
        "embedding_space": space,
        "runs": selectors.training_runs(),
        "form": form or TrainRouterForm(),
        "training_jobs": list(Job.objects.filter(kind="train_router").order_by("-created_at", "-id")[:5]),
    }


class TrainingListView(LoginRequiredMixin, TemplateView):
    """Every training run: its router version, parameters and validation scores; the train form; compare two."""

    template_name = "routing/training_list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **_training_list_context()}


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
        return redirect("console-job", services.enqueue_training(form.params(), request.user).pk)


class TrainingCompareView(LoginRequiredMixin, View):
    """Two training runs side by side: parameters, validation metrics, diagnostics and curves."""

    template_name = "routing/training_compare.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        runs_list = selectors.training_runs()
        if not request.GET.get("a") and not request.GET.get("b"):  # no choice yet: the picker
            return render(request, self.template_name, {"runs": runs_list})
        ids = []
        for key in ("a", "b"):
            try:
                ids.append(int(request.GET.get(key, "")))
            except ValueError:
                return render(request, self.template_name, {"error": "Pick two runs to compare.", "runs": runs_list}, status=400)
        runs = {r.pk: r for r in TrainingRun.objects.select_related("router_version").filter(pk__in=ids)}
        if any(i not in runs for i in ids):
            raise Http404("no such training run")
        left, right = (training_detail_context(runs[i], request.user) for i in ids)
        lp, rp = dict(left["params"]), dict(right["params"])
        lm, rm = dict(left["val_metrics"]), dict(right["val_metrics"])
        # The calibration facts, one row each with both runs' values (in _DIAGNOSTIC_FACTS order).
        ld, rd = dict(left["diagnostic_facts"]), dict(right["diagnostic_facts"])
        diagnostics = [label for _, label in _DIAGNOSTIC_FACTS if label in ld or label in rd]
        return render(request, self.template_name, {
            "left": left, "right": right,
            "params": [{"key": k, "a": lp.get(k), "b": rp.get(k), "differs": lp.get(k) != rp.get(k)} for k in sorted(lp | rp)],
            "metrics": [{"key": k, "a": a, "b": b, "delta": (b - a) if a is not None and b is not None else None}
                        for k, a, b in [(k, lm.get(k), rm.get(k)) for k in sorted(lm | rm)] + [(k, ld.get(k), rd.get(k)) for k in diagnostics]],
            "runs": runs_list,
        })


class TrainingRunView(LoginRequiredMixin, View):
    """One training run: curves (inline SVG and a table), metrics, diagnostics and activation (staff only)."""

    template_name = "routing/training_run.html"

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        run = get_object_or_404(TrainingRun.objects.select_related("router_version"), pk=pk)
        return render(request, self.template_name, training_detail_context(run, request.user))


class TrainingCurvesView(LoginRequiredMixin, View):
    """GET: a run's loss and accuracy per epoch as JSON (what the run and compare pages' charts fetch)."""

    def get(self, request: HttpRequest, pk: int) -> JsonResponse:
        run = get_object_or_404(TrainingRun.objects.select_related("router_version"), pk=pk)
        history = selectors.training_history(run)
        return JsonResponse({"run": run.pk, "epochs": [h["epoch"] for h in history],
                             "series": {key: [h[key] for h in history] for key in ("train_loss", "val_loss", "val_accuracy")}})


class TrainingRunActivateView(LoginRequiredMixin, View):
    """Make the run's router version the serving one; the posted form must carry the confirmation box."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff users may activate a router version.")
        run = get_object_or_404(TrainingRun.objects.select_related("router_version"), pk=pk)
        if run.router_version is None:
            context = {**training_detail_context(run, request.user), "activate_error": "This run produced no router version."}
            return render(request, TrainingRunView.template_name, context, status=400)
        if request.POST.get("confirm") != "yes":
            context = {**training_detail_context(run, request.user), "activate_error": "Tick the box to confirm the switch."}
            return render(request, TrainingRunView.template_name, context, status=400)
        version = services.activate_version(run.router_version)
        messages.success(request, f"Router v{version.version} now serves requests.")
        return redirect("console-training-run", pk=run.pk)
