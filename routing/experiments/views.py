"""Console pages of experiments: the list and the new-experiment form, the plan, per-arm metrics, SRM, decision and actions."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from experts.access import can_edit, can_view, editable_slugs, get_expert_or_404, visible_experts
from sbcommon.console import LoginRequiredMixin

from . import selectors, services, wording
from .choices import ExperimentKind
from .forms import ExperimentForm
from .models import Experiment


def _visible(user) -> Any:
    return Experiment.objects.filter(Q(kind=ExperimentKind.ROUTER) | Q(expert__in=visible_experts(user))).select_related("expert")


def _may_change(user, experiment_or_expert: Any, kind: str) -> bool:
    if kind == ExperimentKind.ROUTER:
        return bool(user.is_staff)
    return can_edit(user, experiment_or_expert)


class ExperimentListView(LoginRequiredMixin, View):
    """GET: every experiment the user may see, and the form to create one. POST: create a draft (the plan is shown on its page)."""

    template_name = "experiments/experiment_list.html"

    def _render(self, request: HttpRequest, form: ExperimentForm, status: int = 200, error: str = "") -> HttpResponse:
        context = {"experiments": _visible(request.user)[:200], "form": form, "error": error}
        return render(request, self.template_name, context, status=status)

    def _form(self, request: HttpRequest, data: Any = None) -> ExperimentForm:
        editable = visible_experts(request.user).filter(slug__in=editable_slugs(request.user))
        experts, router = selectors.experiment_choices(editable, include_router=request.user.is_staff)
        return ExperimentForm(data, experts=experts, router_versions=router)

    def get(self, request: HttpRequest) -> HttpResponse:
        return self._render(request, self._form(request))

    def post(self, request: HttpRequest) -> HttpResponse:
        form = self._form(request, request.POST)
        if not form.is_valid():
            return self._render(request, form, 400)
        data = form.cleaned_data
        expert = None
        if data["kind"] == ExperimentKind.EXPERT:
            expert = get_expert_or_404(request.user, data["expert"], edit=True)  # listed only if editable: a forged slug is a 404
        elif not request.user.is_staff:
            raise PermissionDenied("Only staff users may run router experiments.")
        try:
            experiment = services.create_experiment(
                kind=data["kind"], expert=expert, name=data["name"], control_version=data["control_version"], treatment_version=data["treatment_version"],
                split=data["split"], unit=data["unit"], primary_metric=data["primary_metric"], design=data["design"],
                baseline=data["baseline"], min_effect=data["min_effect"], alpha=data["alpha"], power=data["power"], user=request.user,
            )
        except services.ExperimentError as exc:
            if exc.param in form.fields:
                form.add_error(exc.param, str(exc))
                return self._render(request, form, 400)
            return self._render(request, form, 400, str(exc))
        return redirect("console-experiment", experiment.pk)


def _experiment_for(user, pk: int) -> Experiment:
    experiment = get_object_or_404(Experiment.objects.select_related("expert"), pk=pk)
    if experiment.kind == ExperimentKind.EXPERT and not can_view(user, experiment.expert):
        raise Http404("no such experiment")
    return experiment


class ExperimentDetailView(LoginRequiredMixin, View):
    """The plan (power calculation), per-arm metrics with CIs, the SRM check, the decision and the actions."""

    template_name = "experiments/experiment_detail.html"

    def get(self, request: HttpRequest, pk: int, error: str = "", status: int = 200) -> HttpResponse:
        experiment = _experiment_for(request.user, pk)
        report = services.read(experiment)
        metric = {"thumbs_up_rate": "answers rated helpful", "fallback_rate": "extractive fallbacks", "abstain_rate": "unanswered questions"}
        context = {
            "experiment": experiment, "report": report, "decision": report["decision"], "plan": experiment.plan,
            "summary": wording.summary(report["decision"], experiment.plan, metric.get(experiment.primary_metric, experiment.primary_metric)),
            "can_change": _may_change(request.user, experiment.expert, experiment.kind), "error": error,
        }
        return render(request, self.template_name, context, status=status)


ACTIONS = {"start": services.start, "pause": services.pause, "stop": services.stop, "rollback": services.rollback,
           "promote": services.promote, "keep_control": lambda e: services.promote(e, force_arm="control")}


class ExperimentActionView(LoginRequiredMixin, View):
    """POST start / pause / stop / promote / keep_control / rollback; a refusal re-renders the page with the reason (400)."""

    def post(self, request: HttpRequest, pk: int, action: str) -> HttpResponse:
        experiment = _experiment_for(request.user, pk)
        if action not in ACTIONS and action != "delete":
            raise Http404(f"no action {action!r}")
        if not _may_change(request.user, experiment.expert, experiment.kind):
            raise PermissionDenied("You may not change this experiment.")
        if action == "delete":
            try:
                services.delete_draft(experiment)
            except services.ExperimentError as exc:
                return ExperimentDetailView().get(request, pk, error=str(exc), status=400)
            messages.success(request, f"Draft {experiment.name!r} deleted.")
            return redirect("console-experiments")
        try:
            ACTIONS[action](experiment)
        except services.ExperimentError as exc:
            return ExperimentDetailView().get(request, pk, error=str(exc), status=400)
        messages.success(request, f"{action.replace('_', ' ').capitalize()}: done.")
        return redirect("console-experiment", pk)
