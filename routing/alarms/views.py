"""The alarms page: open alarms with their proposals, the last acknowledged ones, drift reports and nightly evaluations."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from experts.access import visible_slugs
from sbcommon.console import LoginRequiredMixin

from . import selectors, services
from .choices import AlarmStatus
from .models import Alarm, DriftReport, EvaluationSnapshot


class AlarmListView(LoginRequiredMixin, View):
    """Open alarms (load, drift, SRM, uncovered clusters, router candidates) with their proposals; the last acknowledged ones."""

    template_name = "experiments/alarm_list.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        alarms = selectors.visible_alarms(None if request.user.is_staff else visible_slugs(request.user))
        context = {
            "open_alarms": alarms.filter(status=AlarmStatus.OPEN)[:200],
            "acknowledged": alarms.filter(status=AlarmStatus.ACKNOWLEDGED)[:30],
            "drift_reports": DriftReport.objects.all()[:10],
            "snapshots": EvaluationSnapshot.objects.all()[:14],
        }
        return render(request, self.template_name, context)


class AlarmAcknowledgeView(LoginRequiredMixin, View):
    """POST (staff): acknowledge an alarm."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff users may acknowledge alarms.")
        services.acknowledge(get_object_or_404(Alarm, pk=pk), request.user)
        return redirect("console-alarms")
