"""Celery tasks for routing, thin wrappers around services tracked as Job rows."""

from __future__ import annotations

from celery import shared_task

from jobs.services import run_job

from . import services


def _train(job, reporter):
    params = dict(job.params)
    policy = params.pop("activation", "always")  # how it goes live is not a training parameter (nor part of its data fingerprint)
    version = services.train_router_from_labels(params, reporter=reporter, job_id=job.pk, activate=policy)
    return {
        "router_version": version.version,
        "val_accuracy": version.metrics.get("val", {}).get("accuracy"),
        "abstain_threshold": version.metrics.get("abstain_threshold"),
    }


@shared_task(bind=True, acks_late=True, max_retries=1)
def train_router(self, job_id: int) -> None:
    """Train a router on the promoted experts' queries; it goes live by the job's ``activation`` policy (default "always")."""
    run_job(job_id, _train)
