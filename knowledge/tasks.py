"""Celery tasks for knowledge bases: thin wrappers around services, tracked as Job rows."""

from __future__ import annotations

from celery import shared_task

from experts.models import Expert
from jobs.services import JobFailed, run_job

from . import services


def _expert(job) -> Expert:
    expert = Expert.objects.filter(slug=job.params.get("expert")).first()
    if expert is None:
        raise JobFailed(f"expert {job.params.get('expert')!r} no longer exists")
    return expert


@shared_task(bind=True, acks_late=True, max_retries=3)
def index_expert_documents(self, job_id: int) -> None:
    """Index the expert's documents that are not indexed at their current version."""
    run_job(job_id, lambda job, reporter: services.index_pending(_expert(job), reporter))


@shared_task(bind=True, acks_late=True, max_retries=3)
def rebuild_expert_index(self, job_id: int) -> None:
    """Rebuild the expert's collection from scratch behind its alias."""
    run_job(job_id, lambda job, reporter: services.rebuild_index(_expert(job), reporter))
