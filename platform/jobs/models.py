from __future__ import annotations

from django.conf import settings
from django.db import models

from .choices import JobStatus


class Job(models.Model):
    """One background job: its kind, parameters, status, progress, log and outcome."""

    kind = models.CharField(max_length=64, db_index=True)
    key = models.CharField(max_length=255, db_index=True, help_text="Idempotency key: one active job per key.")
    title = models.CharField(max_length=255)
    params = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED, db_index=True)
    progress = models.FloatField(default=0.0, help_text="0..1")
    message = models.CharField(max_length=255, blank=True)
    log = models.TextField(blank=True)
    error = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    task_name = models.CharField(max_length=255, blank=True, help_text="Celery task that runs it: what the sweeper re-sends.")
    queue = models.CharField(max_length=64, blank=True,
                             help_text="The queue its task was sent to (empty: the task's own routing); the sweeper and retries send it there again.")
    dispatched_at = models.DateTimeField(null=True, blank=True, help_text="When its message reached the broker; empty: not yet.")
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="Last sign of life from the worker running it.")
    claimed_by = models.CharField(max_length=255, blank=True,
                                  help_text="The process that runs it (or ran it last), as host:pid: a dead one's job is queued again at once.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.title} ({self.status})"

    @property
    def percent(self) -> int:
        return round(self.progress * 100)

    @property
    def is_active(self) -> bool:
        return self.status in (JobStatus.QUEUED, JobStatus.RUNNING)
