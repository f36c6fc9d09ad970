"""Celery tasks for labeling, thin wrappers around services tracked as Job rows."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from celery import shared_task

from jobs.services import JobFailed, JobReporter, run_job

from . import selectors, services


@dataclass
class _Stage(JobReporter):
    """Reports one stage of a job as its share (``start`` to ``start + span``) of the whole bar."""

    start: float = 0.0
    span: float = 1.0

    def progress(self, fraction: float, message: str = "") -> None:
        super().progress(self.start + self.span * max(0.0, min(1.0, fraction)), message)


def _team(job):
    """The team of a job's imports and runs, from ``params["team"]`` (a group id; ``None`` or absent: no team, staff only)."""
    from django.contrib.auth.models import Group

    team_id = job.params.get("team")
    if team_id is None:
        return None
    team = Group.objects.filter(pk=team_id).first()
    if team is None:  # never fall back to "no team": the work would change hands
        raise JobFailed(f"team #{team_id} no longer exists")
    return team


def _queries(job):
    """The queries a job embeds: its team's when its params name one (``"team"``, even ``None``), else every query."""
    return selectors.team_queries(_team(job)) if "team" in job.params else None


def _import(job, reporter):
    path = job.params["path"]
    if not os.path.exists(path):
        raise JobFailed(f"uploaded file {os.path.basename(path)} is gone")
    source = job.params.get("source") or services.default_source(job.params.get("name", path))
    with open(path, "rb") as handle:
        report = services.import_queries(
            handle, job.params.get("name", path), source,
            redact=bool(job.params.get("redact")), reporter=reporter, total_bytes=os.path.getsize(path), team=_team(job),
        )
    reporter.log(f"imported {report.imported} as source {source!r}, duplicates {report.duplicates}, rejected {report.error_count}")
    for batch in report.failed_batches:
        reporter.log(f"lines {batch['first_line']}-{batch['last_line']} not imported ({batch['reason']}); run the import again to retry them")
    if job.params.get("uploaded") and not report.failed_batches and Path(path).parent == services.upload_dir():
        Path(path).unlink(missing_ok=True)  # imported in full: the copy is no longer needed
    return {**report.as_dict(), "source": source}


@shared_task(bind=True, acks_late=True, max_retries=3)
def import_queries(self, job_id: int) -> None:
    """Import a query log file saved under var/uploads."""
    run_job(job_id, _import)


@shared_task(bind=True, acks_late=True, max_retries=3)
def embed_queries(self, job_id: int) -> None:
    """Embed queries that have no cached embedding for the current model."""
    run_job(job_id, lambda job, reporter: services.embed_missing(source=job.params.get("source") or None, reporter=reporter, queries=_queries(job)))


def _cluster(job, reporter):
    p = job.params
    run = services.cluster_queries(
        source=p.get("source", ""), eps=p.get("eps"), min_samples=int(p.get("min_samples", 5)),
        n_experts=p.get("n_experts"), reporter=reporter, attach_noise=p.get("attach_noise", True),
        grouping=p.get("grouping", services.DEFAULT_GROUPING), team=_team(job),
    )
    return {"run": run.pk, "topics": run.n_topics, "proposals": run.n_experts, "noise_share": run.noise_share, "eps": run.eps}


@shared_task(bind=True, acks_late=True, max_retries=3)
def cluster_queries(self, job_id: int) -> None:
    """Cluster queries into topics and expert proposals."""
    run_job(job_id, _cluster)


def _discover(job, reporter):
    source = job.params.get("source") or None
    embedded = services.embed_missing(source=source, reporter=_Stage(reporter.job_id, start=0.0, span=0.5), queries=_queries(job))
    reporter.log(f"embedded {embedded['embedded']} texts ({embedded['cached']} cached)")
    result = _cluster(job, _Stage(reporter.job_id, start=0.5, span=0.5))
    reporter.log(f"clustering run #{result['run']}: {result['topics']} topics, {result['proposals']} proposals")
    return {**result, "embedded": embedded["embedded"]}


@shared_task(bind=True, acks_late=True, max_retries=3)
def discover(self, job_id: int) -> None:
    """Embed the missing queries, then cluster them into a clustering run to review."""
    run_job(job_id, _discover)


@shared_task(bind=True, acks_late=True, max_retries=3)
def build_grounded_examples(self, job_id: int) -> None:
    """Training examples for an expert's adapter from its labelled questions and documents (services.enqueue_grounded_examples)."""
    from experts.models import Expert

    from .grounding import build_grounded_examples as build

    def work(job, reporter):
        expert = Expert.objects.filter(slug=job.params.get("expert")).first()
        if expert is None:
            raise JobFailed(f"expert {job.params.get('expert')!r} no longer exists")
        return build(expert, int(job.params.get("limit", 200)), reporter)

    run_job(job_id, work)
