"""Creating, claiming and finishing jobs.

A job is enqueued at most once per key while it is active (``enqueue_once``); a worker claims it
with one conditional UPDATE, so two workers never run the same job; progress and log lines are
written as the work goes, and the outcome is a terminal status with a result or an error.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.management.base import OutputWrapper
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .choices import ACTIVE_STATUSES, JobStatus
from .models import Job

logger = logging.getLogger(__name__)


class JobFailed(Exception):
    """A known failure: the job ends as failed with this message, without a traceback."""


def enqueue_once(kind: str, key: str, title: str, task: Any, params: dict[str, Any] | None = None, user: Any = None) -> Job:
    """Create a job and send its Celery task, unless an active job with the same key exists.

    Args:
        kind: the job family ("import_queries", "train_router", ...).
        key: idempotency key; while a job with this key is queued or running, it is returned instead.
        title: what the console shows.
        task: the Celery task, called as ``task.delay(job_id)``.
        params: JSON parameters the task reads from the row.
        user: who asked for it, if anyone.
    """
    with transaction.atomic():
        existing = Job.objects.select_for_update().filter(key=key, status__in=ACTIVE_STATUSES).first()
        if existing is not None:
            return existing
        job = Job.objects.create(kind=kind, key=key, title=title, params=params or {}, created_by=user)
    # Sent after commit so the worker always finds the row.
    transaction.on_commit(lambda: task.delay(job.pk))
    return job


def claim(job_id: int) -> Job | None:
    """Mark a queued job running; ``None`` if it was already claimed, finished or deleted.

    A job left ``running`` by a killed worker is claimed again (acks_late redelivers the task).
    """
    now = timezone.now()
    updated = Job.objects.filter(pk=job_id, status__in=ACTIVE_STATUSES).update(
        status=JobStatus.RUNNING, started_at=now, attempts=F("attempts") + 1
    )
    if not updated:
        return None
    return Job.objects.get(pk=job_id)


@dataclass
class JobReporter:
    """Handed to services so they report progress without knowing about Job rows."""

    job_id: int | None = None

    def progress(self, fraction: float, message: str = "") -> None:
        if self.job_id is None:
            return
        Job.objects.filter(pk=self.job_id).update(progress=max(0.0, min(1.0, fraction)), message=message[:255])

    def log(self, line: str) -> None:
        logger.info("job %s: %s", self.job_id, line)
        if self.job_id is None:
            return
        stamp = timezone.now().strftime("%H:%M:%S")
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=self.job_id)
            job.log = (job.log + f"[{stamp}] {line}\n")[-20000:]
            job.save(update_fields=["log"])


def run_job(job_id: int, work: Callable[[Job, JobReporter], dict[str, Any] | None]) -> Job | None:
    """Claim the job, run ``work(job, reporter)``, and record the outcome.

    Known failures (``JobFailed``) end the job as failed; unknown errors are recorded and re-raised
    so Celery's retry policy and the logs see them.
    """
    job = claim(job_id)
    if job is None:
        logger.info("job %s not claimable (finished or taken); nothing to do", job_id)
        return None
    reporter = JobReporter(job.pk)
    try:
        result = work(job, reporter) or {}
    except JobFailed as exc:
        _finish(job.pk, JobStatus.FAILED, error=str(exc))
        return Job.objects.get(pk=job.pk)
    except Exception as exc:
        _finish(job.pk, JobStatus.FAILED, error=f"{exc.__class__.__name__}: {exc}\n\n{traceback.format_exc()}")
        raise
    _finish(job.pk, JobStatus.SUCCEEDED, result=result)
    return Job.objects.get(pk=job.pk)


def _finish(job_id: int, status: str, *, result: dict[str, Any] | None = None, error: str = "") -> None:
    fields: dict[str, Any] = {"status": status, "finished_at": timezone.now(), "error": error}
    if status == JobStatus.SUCCEEDED:
        fields.update(progress=1.0, result=result or {}, message="done")
    else:
        fields["message"] = error.splitlines()[0][:255] if error else status
    Job.objects.filter(pk=job_id).update(**fields)


@dataclass
class ConsoleReporter(JobReporter):
    """For management commands: progress on one rewritten line on a terminal, every tenth elsewhere (logs stay short)."""

    out: OutputWrapper | None = None
    tty: bool = False
    last_tenth: int = -1

    def progress(self, fraction: float, message: str = "") -> None:
        if self.out is None:
            return
        if self.tty:
            self.out.write(f"\r  {fraction:6.1%}  {message}\033[K", ending="")
            self.out.flush()
        elif int(fraction * 10) > self.last_tenth:
            self.last_tenth = int(fraction * 10)
            self.out.write(f"  {fraction:6.1%}  {message}")

    def log(self, line: str) -> None:
        if self.out is not None:
            self.out.write(("\n" if self.tty else "") + f"  {line}")
