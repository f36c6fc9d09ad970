"""Celery tasks of the jobs app: the sweeper that keeps jobs moving when the broker or a worker fails."""

from __future__ import annotations

from celery import shared_task

from .services import sweep


@shared_task(name="jobs.sweep_jobs", ignore_result=True)
def sweep_jobs() -> dict[str, int]:
    """Resend undelivered job messages, requeue jobs of dead workers (beat runs it every ``JOB_SWEEP_S``)."""
    return sweep()
