"""The alarms and the reports behind them: ``Alarm``, ``DriftReport``, ``EvaluationSnapshot``.

They keep their tables and migrations in the experiments app (``app_label = "experiments"``: tables
``experiments_alarm``, ``experiments_driftreport``, ``experiments_evaluationsnapshot``), where they
began: moving a table to another app is a migration that changes nothing a user sees.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .choices import AlarmKind, AlarmStatus


class Alarm(models.Model):
    """Something the platform noticed (load, drift, SRM, an uncovered cluster) and what it proposes."""

    kind = models.CharField(max_length=16, choices=AlarmKind.choices, db_index=True)
    key = models.CharField(max_length=128, help_text="Dedupe key: one open alarm per key, refreshed when it fires again.")
    subject = models.CharField(max_length=128, blank=True, help_text="The expert slug, experiment or router concerned.")
    experts = models.JSONField(
        default=list, blank=True,
        help_text="The slugs of the experts it concerns, recorded when it is raised: who sees it (selectors.visible_alarms). "
                  "Empty: it names no expert.",
    )
    message = models.TextField()
    proposal = models.TextField(blank=True, help_text="What to do about it.")
    details = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=AlarmStatus.choices, default=AlarmStatus.OPEN, db_index=True)
    times_seen = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    acknowledged_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    acknowledged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "experiments"  # its table and migrations stay where it began (see the module docstring)
        ordering = ["-updated_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["key"], condition=models.Q(status="open"), name="one_open_alarm_per_key")]

    def __str__(self) -> str:
        return f"{self.kind}: {self.message[:60]}"


class DriftReport(models.Model):
    """One drift check: recent questions against the router's training distribution."""

    router_version = models.PositiveIntegerField(null=True, blank=True)
    n_recent = models.PositiveIntegerField(default=0)
    n_reference = models.PositiveIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True)
    drifted = models.BooleanField(default=False)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        app_label = "experiments"  # its table and migrations stay where it began (see the module docstring)
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"drift report {self.pk} ({'drifted' if self.drifted else 'stable'})"


class EvaluationSnapshot(models.Model):
    """The nightly evaluation: router accuracy, retrieval metrics and traffic shares at one point in time."""

    router_version = models.PositiveIntegerField(null=True, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        app_label = "experiments"  # its table and migrations stay where it began (see the module docstring)
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"evaluation {self.created_at:%Y-%m-%d %H:%M}"
