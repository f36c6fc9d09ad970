"""Reads of the schedules page: every periodic task with its crontab in words, next run and last outcome."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.shortcuts import get_object_or_404

from jobs.models import Job

from . import scheduling, words


@dataclass
class ScheduleRow:
    """One periodic task as the console shows it."""

    task: Any
    name: str
    title: str
    description: str
    crontab: dict[str, str]
    last_job: Job | None
    form: Any = None
    when: str = ""  # the schedule in words ("every Monday at 03:00")
    next_run: Any = None  # when it fires next (None: disabled or unknown)


def _schedule_name(task: Any) -> str:
    try:
        return json.loads(task.kwargs or "{}").get("name", "")
    except (TypeError, ValueError):
        return ""


def schedule_rows(invalid: dict[int, Any] | None = None) -> list[ScheduleRow]:
    from django_celery_beat.models import PeriodicTask

    rows = []
    for task in PeriodicTask.objects.select_related("crontab", "interval").order_by("name"):
        name = _schedule_name(task) if task.task == scheduling.TASK_NAME else ""
        default = scheduling.BY_NAME.get(name)
        cron = task.crontab
        fields = {f: getattr(cron, f) for f in scheduling.CRON_FIELDS} if cron else {}
        form = (invalid or {}).get(task.pk)
        if form is not None:  # show what was typed, next to its errors
            fields = {f: form.data.get(f, "") for f in scheduling.CRON_FIELDS}
        built_in = words.BUILT_IN.get(task.task)
        if cron:
            when = words.crontab_words(*(getattr(cron, f) for f in scheduling.CRON_FIELDS))
        elif task.interval:
            when = words.interval_words(task.interval.every, task.interval.period)
        else:
            when = "once" if task.one_off else ""
        rows.append(ScheduleRow(
            task=task, name=name, title=default.title if default else (built_in[0] if built_in else task.name.replace("_", " ").capitalize()),
            description=task.description or (default.description if default else (built_in[1] if built_in else "")),
            crontab=fields, last_job=scheduling.last_outcome(name) if name else None, form=form, when=when, next_run=_next_run(task),
        ))
    return rows


def _next_run(task: Any) -> Any:
    """When beat fires ``task`` next (the schedule's own arithmetic, in its time zone), or None when it is disabled."""
    from django.utils import timezone

    if not task.enabled:
        return None
    try:
        schedule = task.schedule
        now = timezone.now()
        return now + schedule.remaining_estimate(task.last_run_at or now)
    except Exception:  # an odd schedule must not break the page
        return None


def periodic_task_or_404(pk: int) -> Any:
    from django_celery_beat.models import PeriodicTask

    return get_object_or_404(PeriodicTask, pk=pk)
