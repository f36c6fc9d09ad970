"""The audit log for staff: who changed what, and sign-ins, filterable by person, action and date."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views import View

from audit.models import AuditEntry
from sbcommon.console import LoginRequiredMixin

PAGE_SIZE = 100


class AuditFilterForm(forms.Form):
    who = forms.CharField(required=False, max_length=150, label="Who")
    action = forms.ChoiceField(required=False, label="Action")
    what = forms.CharField(required=False, max_length=100, label="What (type or name)")
    period = forms.ChoiceField(required=False, label="When", choices=[("", "Any time"), ("1", "Last 24 hours"), ("7", "Last 7 days"), ("30", "Last 30 days")])

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        actions = AuditEntry.objects.order_by("action").values_list("action", flat=True).distinct()
        self.fields["action"].choices = [("", "Any action"), *((a, a.replace("_", " ")) for a in actions)]


class AuditLogView(LoginRequiredMixin, View):
    """``/audit/`` (staff only): the audit entries, newest first, 100 a page."""

    template_name = "console/audit.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff may read the audit log.")
        form = AuditFilterForm(request.GET or None)
        entries = AuditEntry.objects.select_related("actor").order_by("-at", "-id")
        status = 200
        if form.is_bound and not form.is_valid():
            entries, status = entries.none(), 400
        elif form.is_bound:
            data = form.cleaned_data
            if data["who"]:
                entries = entries.filter(actor_name__icontains=data["who"])
            if data["action"]:
                entries = entries.filter(action=data["action"])
            if data["what"]:
                entries = entries.filter(object_type__icontains=data["what"]) | entries.filter(object_repr__icontains=data["what"])
            if data["period"]:
                entries = entries.filter(at__gte=timezone.now() - timedelta(days=int(data["period"])))
        page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
        query = request.GET.copy()
        query.pop("page", None)
        return render(request, self.template_name, {"form": form, "page": page, "query": query.urlencode()}, status=status)
