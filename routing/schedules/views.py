"""The schedules page: every periodic task with its crontab, enabled flag and last outcome; staff edit them and run them now."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views import View

from experts.redaction import redactor_for
from jobs.views import shown
from sbcommon.console import LoginRequiredMixin

from . import scheduling, selectors
from .forms import CrontabForm


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
