"""Console pages for background jobs: the list (with a self-refreshing htmx partial), one job's detail,
and the retry and cancel actions.

Who sees which job: staff see all; others see the jobs they started, platform-wide jobs (no
``expert`` parameter: imports, clustering, router training) and the jobs of experts they may see.
Retry and cancel need staff, the job's creator, or an expert job of an expert they may change. The
jobs app sits below the experts app, so the expert rules are handed in by the console's URLconf
(``console_urls(visible_slugs, editable_slugs)``); without them only staff and creators act.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from celery import current_app
from django.contrib import messages
from django.contrib.auth import mixins
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils.functional import cached_property
from django.views import View
from django.views.generic import TemplateView

from . import services
from .choices import JobStatus
from .models import Job

SlugsFor = Callable[[object], set[str]]

# Each kind's Celery task, for jobs created before rows recorded their task name.
TASKS_BY_KIND = {
    "import_queries": "labeling.tasks.import_queries", "embed_queries": "labeling.tasks.embed_queries",
    "cluster_queries": "labeling.tasks.cluster_queries", "discover": "labeling.tasks.discover",
    "ingest_documents": "knowledge.tasks.ingest_expert_documents", "index_documents": "knowledge.tasks.index_expert_documents",
    "rebuild_index": "knowledge.tasks.rebuild_expert_index", "delete_document": "knowledge.tasks.delete_expert_document",
    "drop_collection": "knowledge.tasks.drop_expert_collection", "train_router": "routing.tasks.train_router",
}

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


def _no_slugs(user: object) -> set[str]:
    return set()


def visible_jobs(user: Any, visible_slugs: SlugsFor = _no_slugs) -> QuerySet[Job]:
    """The jobs ``user`` may see: all for staff; else their own, platform-wide ones and their experts' ones."""
    jobs = Job.objects.select_related("created_by")
    if user.is_staff:
        return jobs
    return jobs.filter(Q(created_by=user) | ~Q(params__has_key="expert") | Q(params__expert__in=sorted(visible_slugs(user))))


class JobAccessMixin(LoginRequiredMixin):
    """Which jobs the signed-in user may see and act on (see the module docstring)."""

    visible_slugs: SlugsFor = staticmethod(_no_slugs)  # type: ignore[assignment]
    editable_slugs: SlugsFor = staticmethod(_no_slugs)  # type: ignore[assignment]

    def visible_jobs(self) -> QuerySet[Job]:
        return visible_jobs(self.request.user, self.visible_slugs)

    def can_act(self, job: Job) -> bool:
        user = self.request.user
        if user.is_staff or (job.created_by_id is not None and job.created_by_id == user.pk):
            return True
        expert = job.params.get("expert") if isinstance(job.params, dict) else None
        return isinstance(expert, str) and expert in self._editable

    @cached_property
    def _editable(self) -> set[str]:
        """The experts the user may change, read once per request (the list asks for every row)."""
        return self.editable_slugs(self.request.user)

    def get_job(self, pk: int) -> Job:
        return get_object_or_404(self.visible_jobs(), pk=pk)

    def actions_for(self, job: Job) -> tuple[bool, bool]:
        """(may retry, may cancel) for the signed-in user."""
        can_act = self.can_act(job)
        return (can_act and job.status in services.RETRYABLE_STATUSES and task_for(job) is not None, can_act and job.is_active)

    def list_context(self) -> dict[str, Any]:
        jobs = list(self.visible_jobs()[:JOB_LIST_LIMIT])
        for job in jobs:
            job.can_retry, job.can_cancel = self.actions_for(job)
        return {"jobs": jobs, "any_active": any(job.is_active for job in jobs)}


class JobListView(JobAccessMixin, TemplateView):
    template_name = "jobs/job_list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **self.list_context()}


class JobRowsView(JobAccessMixin, TemplateView):
    """The list's table body alone; it keeps polling itself while any job is queued or running."""

    template_name = "jobs/partials/job_rows.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **self.list_context()}


class JobDetailView(JobAccessMixin, TemplateView):
    template_name = "jobs/job_detail.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        job = self.get_job(kwargs["pk"])
        result = json.dumps(job.result, indent=2, sort_keys=True, default=str) if job.result else ""
        can_retry, can_cancel = self.actions_for(job)
        return {**super().get_context_data(**kwargs), "job": job, "result_json": result, "can_retry": can_retry, "can_cancel": can_cancel}


class JobBodyView(JobDetailView):
    """One job's status, log, error and result alone; it keeps polling itself while the job is active."""

    template_name = "jobs/partials/job_body.html"


def task_for(job: Job) -> Any:
    """The Celery task that runs ``job`` (its recorded task name, else its kind's), or ``None``."""
    name = getattr(job, "task_name", "") or TASKS_BY_KIND.get(job.kind, "")
    if not name:
        return None
    if name not in current_app.tasks:
        # A web process has not necessarily imported every app's tasks module; Celery's loader does (autodiscovery).
        current_app.loader.import_default_modules()
    return current_app.tasks.get(name)


class JobRetryView(JobAccessMixin, View):
    """POST: a new attempt of a failed or cancelled job, then its page."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        job = self.get_job(pk)
        if not self.can_act(job):
            raise PermissionDenied("You may not retry this job.")
        task = task_for(job)
        if task is None or job.status not in services.RETRYABLE_STATUSES:
            messages.error(request, "Only a failed or cancelled job of a known kind can be retried." if task else f"No task runs jobs of kind {job.kind!r}.")
            return redirect("console-job", job.pk)
        attempt = services.retry_job(job, task, user=request.user)
        messages.success(request, f"Retrying as job #{attempt.pk}.")
        return redirect("console-job", attempt.pk)


class JobCancelView(JobAccessMixin, View):
    """POST: cancel a queued or running job (a running one stops at its next progress report)."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        job = self.get_job(pk)
        if not self.can_act(job):
            raise PermissionDenied("You may not cancel this job.")
        if services.cancel_job(job, user=request.user):
            messages.success(request, "Cancelled." if job.status == JobStatus.QUEUED else "Cancelled: the worker stops at its next progress report.")
        else:
            messages.info(request, "The job had already finished.")
        return redirect("console-job", job.pk)
