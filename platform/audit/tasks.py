"""Celery tasks of the audit log."""

from __future__ import annotations

from celery import shared_task

from .services import prune


@shared_task(name="audit.prune_audit_log", ignore_result=True)
def prune_audit_log() -> int:
    """Delete entries older than ``AUDIT_RETENTION_DAYS`` (beat runs it daily)."""
    return prune()
