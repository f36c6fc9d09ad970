"""Celery tasks for knowledge bases: thin wrappers around services, tracked as Job rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery import shared_task

from experts.models import Expert
from jobs.services import JobFailed, JobReporter, run_job

from . import indexing, ingest


def _expert(job) -> Expert:
    expert = Expert.objects.filter(slug=job.params.get("expert")).first()
    if expert is None:
        raise JobFailed(f"expert {job.params.get('expert')!r} no longer exists")
    return expert


def _ingest(job, reporter: JobReporter) -> dict[str, Any]:
    expert = _expert(job)
    files = [(f["name"], Path(f["path"])) for f in job.params.get("files", []) if Path(f["path"]).exists()]
    if not files:
        raise JobFailed("the uploaded files are gone (already ingested, or removed); upload them again")
    report = ingest.ingest_files(expert, files, reporter)
    for _, path in files:  # their text is in the database now
        path.unlink(missing_ok=True)
    result = report.as_dict()
    if report.failed and len(report.failed) == len(files):
        reasons = "; ".join(f"{f['file']}: {f['error']}" for f in report.failed[:5])
        raise JobFailed(f"no document could be read from the upload: {reasons}")
    return result


@shared_task(bind=True, acks_late=True, max_retries=3)
def ingest_expert_documents(self, job_id: int) -> None:
    """Parse uploaded files into the expert's documents, then index what changed."""
    run_job(job_id, _ingest)


@shared_task(bind=True, acks_late=True, max_retries=3)
def index_expert_documents(self, job_id: int) -> None:
    """Index the expert's documents that are not indexed at their current version."""
    run_job(job_id, lambda job, reporter: indexing.index_pending(_expert(job), reporter))


@shared_task(bind=True, acks_late=True, max_retries=3)
def rebuild_expert_index(self, job_id: int) -> None:
    """Rebuild the expert's collection from scratch behind its alias (also re-embeds with a new model)."""
    run_job(job_id, lambda job, reporter: indexing.rebuild_index(_expert(job), reporter))


@shared_task(bind=True, acks_late=True, max_retries=3)
def delete_expert_document(self, job_id: int) -> None:
    """Delete one document and its chunks (a rerun finds nothing left to do)."""
    run_job(job_id, lambda job, reporter: indexing.delete_document_by_id(_expert(job), int(job.params["document"])))


@shared_task(bind=True, acks_late=True, max_retries=3)
def drop_expert_collection(self, job_id: int) -> None:
    """Drop the expert's collection; its documents stay, pending re-indexing."""
    run_job(job_id, lambda job, reporter: indexing.drop_collection(_expert(job)))
