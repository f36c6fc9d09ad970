"""``Experiment``: an A/B test of two versions of an expert or of the router.

This app's migrations also hold the tables of the alarms' models (``routing.alarms.models``) and the
schedules' ``ScheduledRun`` (``routing.schedules.models``), which declare ``app_label = "experiments"``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .choices import Design, ExperimentKind, ExperimentStatus, Metric, Unit


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
