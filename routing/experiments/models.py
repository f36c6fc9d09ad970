from __future__ import annotations

from django.conf import settings
from django.db import models

from .choices import AlarmKind, AlarmStatus, Design, ExperimentKind, ExperimentStatus, Metric, Unit


class Experiment(models.Model):
    """An A/B test of two versions (of one expert, or of the router) with its design and decision."""

    name = models.CharField(max_length=128)
    kind = models.CharField(max_length=16, choices=ExperimentKind.choices)
    expert = models.ForeignKey("experts.Expert", null=True, blank=True, on_delete=models.CASCADE, related_name="experiments")
    target = models.CharField(max_length=80, help_text="What the experiment holds: 'expert:<slug>' or 'router'.")
    control_version = models.PositiveIntegerField(help_text="Arm A: ExpertVersion.version or RouterVersion.version.")
    treatment_version = models.PositiveIntegerField(help_text="Arm B.")
    split = models.FloatField(default=0.5, help_text="Share of subjects in the treatment arm (0 < split < 1).")
    unit = models.CharField(max_length=16, choices=Unit.choices, default=Unit.CONVERSATION)
    salt = models.CharField(max_length=32, help_text="Hashed with the subject: assignment is sticky for the experiment's life.")
    primary_metric = models.CharField(max_length=32, choices=Metric.choices, default=Metric.THUMBS_UP)
    design = models.CharField(max_length=16, choices=Design.choices, default=Design.SEQUENTIAL)
    min_effect = models.FloatField(default=0.05, help_text="Relative improvement worth detecting.")
    baseline = models.FloatField(default=0.6, help_text="Expected control rate of the primary metric (for the power calculation).")
    alpha = models.FloatField(default=0.05)
    power = models.FloatField(default=0.8)
    plan = models.JSONField(default=dict, blank=True, help_text="The power calculation, fixed at creation.")
    status = models.CharField(max_length=16, choices=ExperimentStatus.choices, default=ExperimentStatus.DRAFT, db_index=True)
    previous_version = models.PositiveIntegerField(null=True, blank=True, help_text="The version serving before promotion (for rollback).")
    winner = models.CharField(max_length=16, blank=True)
    decision = models.JSONField(default=dict, blank=True, help_text="The last read of the metrics and the decision.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["target"], condition=models.Q(status__in=["draft", "running", "paused"]), name="one_open_experiment_per_target"),
            models.CheckConstraint(condition=models.Q(split__gt=0, split__lt=1), name="experiment_split_inside_0_1"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_open(self) -> bool:
        return self.status in ("draft", "running", "paused")


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
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"drift report {self.pk} ({'drifted' if self.drifted else 'stable'})"


class EvaluationSnapshot(models.Model):
    """The nightly evaluation: router accuracy, retrieval metrics and traffic shares at one point in time."""

    router_version = models.PositiveIntegerField(null=True, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"evaluation {self.created_at:%Y-%m-%d %H:%M}"


class ScheduledRun(models.Model):
    """A claimed firing of a scheduled task: (task, slot) is unique, so a beat firing twice enqueues once."""

    task = models.CharField(max_length=128)
    slot = models.CharField(max_length=64, help_text="The schedule period this firing belongs to (e.g. the minute it was due).")
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["task", "slot"], name="one_run_per_task_slot")]

    def __str__(self) -> str:
        return f"{self.task} @ {self.slot}"
