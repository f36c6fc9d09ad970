"""Console pages: experiments (plan, per-arm metrics, SRM, decision, actions), schedules, alarms."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from experts.access import can_edit, can_view, editable_slugs, get_expert_or_404, visible_experts, visible_slugs
from experts.redaction import redactor_for
from jobs.views import shown
from sbcommon.console import LoginRequiredMixin

from . import scheduling, selectors, services, wording
from .choices import AlarmStatus, ExperimentKind
from .forms import CrontabForm, ExperimentForm
from .models import Alarm, Experiment

# --- experiments -----------------------------------------------------------------------------------

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


# --- schedules -------------------------------------------------------------------------------------

class ScheduleListView(LoginRequiredMixin, View):
    """Every periodic task with its crontab, enabled flag and last outcome; staff edit them."""

    template_name = "experiments/schedule_list.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        rows, redact = selectors.schedule_rows(), redactor_for(request.user)
        for row in rows:
            if row.last_job is not None:
                shown(row.last_job, redact)  # a check's last message may name any team's expert
        return render(request, self.template_name, {"rows": rows})


class ScheduleEditView(LoginRequiredMixin, View):
    """POST (staff): a new crontab and enabled flag for one periodic task; field errors on a crontab celery rejects (400)."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff users may edit schedules.")
        task = selectors.periodic_task_or_404(pk)
        form = CrontabForm(request.POST)
        if not form.is_valid():
            rows = selectors.schedule_rows(invalid={task.pk: form})
            return render(request, ScheduleListView.template_name, {"rows": rows}, status=400)
        scheduling.save_crontab(task, form.cleaned_data)
        messages.success(request, f"Schedule {task.name} saved.")
        return redirect("console-schedules")


class ScheduleRunNowView(LoginRequiredMixin, View):
    """POST (staff): run a scheduled job now (still one active job per schedule)."""

    def post(self, request: HttpRequest, name: str) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff users may run schedules.")
        if name not in scheduling.BY_NAME:
            raise Http404(f"no schedule {name!r}")
        job = scheduling.fire(name, slot_seconds=1)
        if job is None:
            messages.info(request, "It was just started.")
            return redirect("console-schedules")
        return redirect("console-job", job.pk)


# --- alarms ----------------------------------------------------------------------------------------

class AlarmListView(LoginRequiredMixin, View):
    """Open alarms (load, drift, SRM, uncovered clusters, router candidates) with their proposals; the last acknowledged ones."""

    template_name = "experiments/alarm_list.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        alarms = selectors.visible_alarms(None if request.user.is_staff else visible_slugs(request.user))
        context = {
            "open_alarms": alarms.filter(status=AlarmStatus.OPEN)[:200],
            "acknowledged": alarms.filter(status=AlarmStatus.ACKNOWLEDGED)[:30],
            "drift_reports": selectors.recent_drift_reports(),
            "snapshots": selectors.recent_snapshots(),
        }
        return render(request, self.template_name, context)


class AlarmAcknowledgeView(LoginRequiredMixin, View):
    """POST (staff): acknowledge an alarm."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff users may acknowledge alarms.")
        services.acknowledge(get_object_or_404(Alarm, pk=pk), request.user)
        return redirect("console-alarms")
