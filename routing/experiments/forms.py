"""Console forms: a new experiment, and a schedule's crontab."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from .choices import Design, ExperimentKind, Metric, Unit
from .scheduling import CRON_FIELDS, InvalidCrontab, validate_crontab


class ExperimentForm(forms.Form):
    """What an experiment compares and how it is read; the service checks versions, overlap and the plan."""

    name = forms.CharField(max_length=128, required=False)
    kind = forms.ChoiceField(choices=ExperimentKind.choices, initial=ExperimentKind.EXPERT)
    expert = forms.CharField(max_length=64, required=False, help_text="Expert slug (expert experiments).")
    control_version = forms.IntegerField(min_value=1, help_text="Arm A (usually the active version).")
    treatment_version = forms.IntegerField(min_value=1, help_text="Arm B (the candidate).")
    split = forms.FloatField(initial=0.5, help_text="Share of conversations in the treatment arm, strictly between 0 and 1.")
    unit = forms.ChoiceField(choices=Unit.choices, initial=Unit.CONVERSATION)
    primary_metric = forms.ChoiceField(choices=Metric.choices, initial=Metric.THUMBS_UP)
    design = forms.ChoiceField(choices=Design.choices, initial=Design.SEQUENTIAL)
    baseline = forms.FloatField(initial=0.6, help_text="Expected control rate of the primary metric (for the power calculation).")
    min_effect = forms.FloatField(initial=settings.EXPERIMENT_MIN_EFFECT, help_text="Relative improvement worth detecting (0.05 = +5%).")
    alpha = forms.FloatField(initial=settings.EXPERIMENT_ALPHA)
    power = forms.FloatField(initial=settings.EXPERIMENT_POWER)

    def clean_split(self) -> float:
        split = self.cleaned_data["split"]
        if not 0 < split < 1:
            raise forms.ValidationError("The split must send traffic to both arms: a treatment share strictly between 0 and 1 (0/100 is not an experiment).")
        return split

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("kind") == ExperimentKind.EXPERT and not data.get("expert"):
            self.add_error("expert", "An expert experiment needs the expert's slug.")
        return data


class CrontabForm(forms.Form):
    """A schedule's crontab, each field checked with celery's parser; and whether it is enabled."""

    minute = forms.CharField(max_length=240)
    hour = forms.CharField(max_length=96)
    day_of_month = forms.CharField(max_length=124, label="Day of month")
    month_of_year = forms.CharField(max_length=64, label="Month")
    day_of_week = forms.CharField(max_length=64, label="Day of week")
    enabled = forms.BooleanField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if any(name not in data for name in CRON_FIELDS):
            return data
        try:
            data.update(validate_crontab(**{name: data[name] for name in CRON_FIELDS}))
        except InvalidCrontab as exc:
            self.add_error(exc.field, str(exc))
        return data
