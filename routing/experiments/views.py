"""Console pages of experiments: the list and the new-experiment form, the plan, per-arm metrics, SRM, decision and actions."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views import View

from sbcommon.console import LoginRequiredMixin

from . import selectors, services, wording
from .forms import ExperimentForm, experiment_form


class ExperimentListView(LoginRequiredMixin, View):
    """GET: every experiment the user may see, and the form to create one. POST: create a draft (the plan is shown on its page)."""

    template_name = "experiments/experiment_list.html"

    def _render(self, request: HttpRequest, form: ExperimentForm, status: int = 200, error: str = "") -> HttpResponse:
        context = {"experiments": selectors.visible_experiments(request.user)[:200], "form": form, "error": error}
        return render(request, self.template_name, context, status=status)

    def get(self, request: HttpRequest) -> HttpResponse:
        return self._render(request, experiment_form(request.user))

    def post(self, request: HttpRequest) -> HttpResponse:
        form = experiment_form(request.user, request.POST)
        if not form.is_valid():
            return self._render(request, form, 400)
        try:
            experiment = services.create_for(request.user, form.cleaned_data)
        except services.ExperimentError as exc:
            if exc.param in form.fields:
                form.add_error(exc.param, str(exc))
                return self._render(request, form, 400)
            return self._render(request, form, 400, str(exc))
        return redirect("console-experiment", experiment.pk)


class ExperimentDetailView(LoginRequiredMixin, View):
    """The plan (power calculation), per-arm metrics with CIs, the SRM check, the decision and the actions."""

    template_name = "experiments/experiment_detail.html"

    def get(self, request: HttpRequest, pk: int, error: str = "", status: int = 200) -> HttpResponse:
        experiment = selectors.experiment_for(request.user, pk)
        report = services.read(experiment)
        metric = {"thumbs_up_rate": "answers rated helpful", "fallback_rate": "extractive fallbacks", "abstain_rate": "unanswered questions"}
        context = {
            "experiment": experiment, "report": report, "decision": report["decision"], "plan": experiment.plan,
            "summary": wording.summary(report["decision"], experiment.plan, metric.get(experiment.primary_metric, experiment.primary_metric)),
            "can_change": selectors.may_change(request.user, experiment.expert, experiment.kind), "error": error,
        }
        return render(request, self.template_name, context, status=status)


class ExperimentActionView(LoginRequiredMixin, View):
    """POST start / pause / stop / promote / keep_control / rollback; a refusal re-renders the page with the reason (400)."""

    def post(self, request: HttpRequest, pk: int, action: str) -> HttpResponse:
        experiment = selectors.experiment_for(request.user, pk)
        if action not in services.ACTIONS:
            raise Http404(f"no action {action!r}")
        if not selectors.may_change(request.user, experiment.expert, experiment.kind):
            raise PermissionDenied("You may not change this experiment.")
        try:
            services.ACTIONS[action](experiment)
        except services.ExperimentError as exc:
            return ExperimentDetailView().get(request, pk, error=str(exc), status=400)
        if action == "delete":
            messages.success(request, f"Draft {experiment.name!r} deleted.")
            return redirect("console-experiments")
        messages.success(request, f"{action.replace('_', ' ').capitalize()}: done.")
        return redirect("console-experiment", pk)
