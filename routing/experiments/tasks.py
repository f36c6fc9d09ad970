"""Celery tasks of experiments and scheduled jobs: thin, IDs in, work in ``jobs``/``scheduling``."""

from __future__ import annotations

from celery import shared_task

from jobs.services import JobFailed, run_job

from . import jobs as _work  # noqa: F401  (fills scheduling.WORK)
from . import scheduling


@shared_task(name=scheduling.TASK_NAME, acks_late=True, ignore_result=True)
def fire_schedule(name: str, slot_seconds: int = 60) -> int | None:
    """Beat's entry point: claim this period's firing of ``name`` and enqueue its job (once)."""
    job = scheduling.fire(name, slot_seconds=slot_seconds)
    return job.pk if job is not None else None


def _dispatch(job, reporter):
    name = job.params.get("schedule", "")
    work = scheduling.WORK.get(name)
    if work is None:
        raise JobFailed(f"unknown scheduled job {name!r}")
    return work(job, reporter)


@shared_task(name="experiments.run_scheduled", bind=True, acks_late=True, max_retries=1)
def run_scheduled(self, job_id: int) -> None:
    """Run one scheduled job's work and record its outcome on the Job row."""
    run_job(job_id, _dispatch)
