"""Celery tasks for experts: thin wrappers around services, tracked as Job rows.

``train_adapter`` matches ``*.train_*``, so settings.CELERY_TASK_ROUTES sends it to TRAINING_QUEUE;
``services.start_adapter_training`` names the queue explicitly (``gpu`` when CUDA is visible, see
``services.training_queue``).
"""

from __future__ import annotations

from celery import shared_task

from jobs.services import run_job

from . import services


@shared_task(bind=True, acks_late=True, max_retries=3)
def train_adapter(self, job_id: int) -> None:
    """Train the expert's LoRA adapter into a candidate version (resumes from its last checkpoint on a rerun)."""
    run_job(job_id, services.train_adapter_job)
