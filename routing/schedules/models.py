"""``ScheduledRun``: a claimed firing of a schedule (``routing.schedules.scheduling.fire``).

It keeps its table and migrations in the experiments app (``app_label = "experiments"``: table
``experiments_scheduledrun``), where it began: moving a table to another app is a migration that
changes nothing a user sees.
"""

from __future__ import annotations

from django.db import models


class ScheduledRun(models.Model):
    """A claimed firing of a scheduled task: (task, slot) is unique, so a beat firing twice enqueues once."""

    task = models.CharField(max_length=128)
    slot = models.CharField(max_length=64, help_text="The schedule period this firing belongs to (e.g. the minute it was due).")
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "experiments"  # its table and migrations stay where it began (see the module docstring)
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["task", "slot"], name="one_run_per_task_slot")]

    def __str__(self) -> str:
        return f"{self.task} @ {self.slot}"
