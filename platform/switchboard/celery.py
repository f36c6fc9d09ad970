"""The Celery application; its configuration comes from Django settings (``CELERY_*``)."""

from __future__ import annotations

import logging
import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchboard.settings")

app = Celery("switchboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

logger = logging.getLogger(__name__)


@worker_ready.connect
def recover_jobs_on_start(sender=None, **kwargs) -> None:
    """A worker starting sweeps once before it takes work: a job its previous process left running
    is queued again now (after the jobs already queued), not only once ``JOB_LEASE_S`` has passed."""
    from jobs.services import sweep

    try:
        counts = sweep(starting=True)
    except Exception:  # the database is not reachable yet: beat's sweeper does this later
        logger.warning("jobs.sweep_on_start_failed", exc_info=True)
        return
    if any(counts.values()):
        logger.info("jobs.recovered_on_start", extra=counts)
