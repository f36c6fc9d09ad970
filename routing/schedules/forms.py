"""A schedule's crontab as the schedules page edits it."""

from __future__ import annotations

from typing import Any

from django import forms

from .scheduling import CRON_FIELDS, InvalidCrontab, validate_crontab


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
