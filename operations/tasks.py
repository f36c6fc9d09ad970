"""Celery tasks of operations: beat's daily backup (thin: the work is ``services.scheduled_backup``)."""

from __future__ import annotations

from celery import shared_task

from jobs.services import enqueue_once, run_job

from . import services


@shared_task(name="operations.run_backup", bind=True, acks_late=True, max_retries=0)
def run_backup(self, job_id: int) -> None:
    """Run one backup job and record its outcome on the Job row."""
    run_job(job_id, services.scheduled_backup)


@shared_task(name=services.TASK_NAME, acks_late=True, ignore_result=True)
def backup() -> int:
    """Beat's entry point: enqueue a backup job (one at a time)."""
    return enqueue_once("backup", "backup", "Back up the data", run_backup).pk
