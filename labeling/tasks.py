"""Celery tasks for labeling, thin wrappers around services tracked as Job rows."""

from __future__ import annotations

import os

from celery import shared_task

from jobs.services import JobFailed, run_job

from . import services


def _import(job, reporter):
    path = job.params["path"]
    if not os.path.exists(path):
        raise JobFailed(f"uploaded file {os.path.basename(path)} is gone")
    with open(path, "rb") as handle:
        report = services.import_queries(
            handle, job.params.get("name", path), job.params.get("source", "upload"),
            redact=bool(job.params.get("redact")), reporter=reporter, total_bytes=os.path.getsize(path),
        )
    reporter.log(f"imported {report.imported}, duplicates {report.duplicates}, rejected {report.error_count}")
    return report.as_dict()


@shared_task(bind=True, acks_late=True, max_retries=3)
def import_queries(self, job_id: int) -> None:
    """Import a query log file saved under var/uploads."""
    run_job(job_id, _import)


@shared_task(bind=True, acks_late=True, max_retries=3)
def embed_queries(self, job_id: int) -> None:
    """Embed queries that have no cached embedding for the current model."""
    run_job(job_id, lambda job, reporter: services.embed_missing(source=job.params.get("source") or None, reporter=reporter))


def _cluster(job, reporter):
    p = job.params
    run = services.cluster_queries(
        source=p.get("source", ""), eps=p.get("eps"), min_samples=int(p.get("min_samples", 5)),
        n_experts=p.get("n_experts"), reporter=reporter,
    )
    return {"run": run.pk, "topics": run.n_topics, "proposals": run.n_experts, "noise_share": run.noise_share, "eps": run.eps}


@shared_task(bind=True, acks_late=True, max_retries=3)
def cluster_queries(self, job_id: int) -> None:
    """Cluster queries into topics and expert proposals."""
    run_job(job_id, _cluster)
