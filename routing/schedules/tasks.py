"""Celery tasks of the schedules: thin, IDs in, work in ``jobs``/``scheduling``.

``run_scheduled`` (the task a firing enqueues) is defined in ``scheduling`` next to ``fire``, which
enqueues it; it is exported here with the beat task, so the worker's autodiscovery finds both.
"""

from __future__ import annotations

from celery import shared_task

from . import scheduling
from .scheduling import run_scheduled

__all__ = ["fire_schedule", "run_scheduled"]


@shared_task(name=scheduling.TASK_NAME, acks_late=True, ignore_result=True)
def fire_schedule(name: str, slot_seconds: int = 60) -> int | None:
    """Beat's entry point: claim this period's firing of ``name`` and enqueue its job (once)."""
    job = scheduling.fire(name, slot_seconds=slot_seconds)
    return job.pk if job is not None else None
