"""Console pages for background jobs: the list (with a self-refreshing htmx partial) and one job's detail."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth import mixins
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.views.generic import TemplateView

from .models import Job
from .selectors import recent_jobs

JOB_LIST_LIMIT = 50


class LoginRequiredMixin(mixins.LoginRequiredMixin):
    """Django's mixin, except that an htmx request from an expired session reloads the login page.

    A plain redirect would be followed inside the XHR and the login form swapped into a fragment.
    """

    def handle_no_permission(self) -> HttpResponse:
        request = self.request
        if getattr(request, "htmx", False) and not request.user.is_authenticated:
            # Back to the page the user was on, not to the fragment's URL.
            current = urlsplit(request.headers.get("HX-Current-URL", ""))
            next_url = current.path + (f"?{current.query}" if current.query else "") if current.path else request.get_full_path()
            login = redirect_to_login(next_url, self.get_login_url())
            return HttpResponse(status=204, headers={"HX-Redirect": login["Location"]})
        return super().handle_no_permission()


def _list_context() -> dict[str, Any]:
    jobs = list(recent_jobs(JOB_LIST_LIMIT))
    return {"jobs": jobs, "any_active": any(job.is_active for job in jobs)}


class JobListView(LoginRequiredMixin, TemplateView):
    template_name = "jobs/job_list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **_list_context()}


class JobRowsView(LoginRequiredMixin, TemplateView):
    """The list's table body alone; it keeps polling itself while any job is queued or running."""

    template_name = "jobs/partials/job_rows.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **_list_context()}


class JobDetailView(LoginRequiredMixin, TemplateView):
    template_name = "jobs/job_detail.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        job = get_object_or_404(Job, pk=kwargs["pk"])
        result = json.dumps(job.result, indent=2, sort_keys=True, default=str) if job.result else ""
        return {**super().get_context_data(**kwargs), "job": job, "result_json": result}


class JobBodyView(JobDetailView):
    """One job's status, log, error and result alone; it keeps polling itself while the job is active."""

    template_name = "jobs/partials/job_body.html"
