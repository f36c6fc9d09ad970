"""Console pages for background jobs: the list (a self-refreshing htmx partial), one job's detail, retry and cancel.

Staff see every job; anyone else a job naming an expert they may see, a job of a team they are in, and
the platform-wide jobs, their text passed through ``redact_for``. Retry and cancel need staff, the
creator, or an expert they may change. The expert rules are handed in by the console's URLconf
(``console_urls``), since jobs sits below experts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from celery import current_app
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils.functional import cached_property
from django.views import View
from django.views.generic import TemplateView

from sbcommon.console import LoginRequiredMixin

from . import services
from .choices import JobStatus
from .models import Job

SlugsFor = Callable[[object], set[str]]

JOB_LIST_LIMIT = 50


def _no_slugs(user: object) -> set[str]:
    return set()


def visible_jobs(user: Any, visible_slugs: SlugsFor = _no_slugs) -> QuerySet[Job]:
    """The jobs ``user`` may see: all for staff; else the platform-wide ones, their experts' and their teams' (module docstring)."""
    jobs = Job.objects.select_related("created_by")
    if getattr(user, "is_staff", False):
        return jobs
    if not getattr(user, "is_authenticated", False):
        return jobs.none()
    return jobs.filter(
        ~Q(params__has_key="expert") | Q(params__expert__in=sorted(visible_slugs(user))),
        ~Q(params__has_key="team") | Q(params__team__in=list(user.groups.values_list("pk", flat=True))),  # a team is an auth group
    )


Redact = Callable[[Any], Any]
RedactFor = Callable[[object], Redact]


def _as_is(user: object) -> Redact:
    return lambda value: value


def shown(job: Job, redact: Redact) -> Job:
    """``job`` with the text it shows (title, message, log, error, result) passed through ``redact``; for display only, never saved."""
    job.title, job.message, job.log, job.error = redact(job.title), redact(job.message), redact(job.log), redact(job.error)
    job.result = redact(job.result)
    return job


LinksFor = Callable[[Job], list[tuple[str, str]]]


class JobAccessMixin(LoginRequiredMixin):
    """Which jobs the signed-in user may see and act on (see the module docstring)."""

    visible_slugs: SlugsFor = staticmethod(_no_slugs)  # type: ignore[assignment]
    editable_slugs: SlugsFor = staticmethod(_no_slugs)  # type: ignore[assignment]
    outcome_links: LinksFor = staticmethod(lambda job: [])  # type: ignore[assignment]
    redact_for: RedactFor = staticmethod(_as_is)  # type: ignore[assignment]

    def visible_jobs(self) -> QuerySet[Job]:
        return visible_jobs(self.request.user, self.visible_slugs)

    @cached_property
    def _redact(self) -> Redact:
        """The signed-in user's redaction of other teams' experts, made once per request."""
        return self.redact_for(self.request.user)

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
            shown(job, self._redact)
        return {"jobs": jobs, "any_active": any(job.is_active for job in jobs)}


class JobListView(JobAccessMixin, TemplateView):
    template_name = "jobs/job_list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **self.list_context()}


class JobRowsView(JobListView):
    """The list's table body alone; it keeps polling itself while any job is queued or running."""

    template_name = "jobs/partials/job_rows.html"


class JobDetailView(JobAccessMixin, TemplateView):
    template_name = "jobs/job_detail.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        job = shown(self.get_job(kwargs["pk"]), self._redact)
        result = json.dumps(job.result, indent=2, sort_keys=True, default=str) if job.result else ""
        can_retry, can_cancel = self.actions_for(job)
        # The result's plain figures, for a reader; the whole JSON stays one click away.
        facts = [(str(k).replace("_", " "), v) for k, v in sorted((job.result or {}).items())
                 if isinstance(v, str | int | float | bool) and v != "" and len(str(v)) < 120] if isinstance(job.result, dict) else []
        return {**super().get_context_data(**kwargs), "job": job, "result_json": result, "result_facts": facts,
                "links": self.outcome_links(job) if job.status == "succeeded" else [], "can_retry": can_retry, "can_cancel": can_cancel}


class JobBodyView(JobDetailView):
    """One job's status, log, error and result alone; it keeps polling itself while the job is active."""

    template_name = "jobs/partials/job_body.html"


def task_for(job: Job) -> Any:
    """The Celery task that runs ``job`` (the task name its row recorded), or ``None``.

    Every job records its task when it is enqueued (``services.enqueue_once``); rows from before that
    were filled in by migration 0003. A job without one (run in a shell, say) cannot be retried.
    """
    name = job.task_name
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
        if job.status not in services.RETRYABLE_STATUSES:
            messages.error(request, "Only a failed or cancelled job can be retried.")
            return redirect("console-job", job.pk)
        task = task_for(job)
        if task is None:
            messages.error(request, f"This job cannot be retried: no Celery task named {job.task_name!r} is registered."
                           if job.task_name else "This job cannot be retried: it records no task to run it (it was started in a shell, say).")
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
