"""Reads for the console: schedules with their last outcome, versions per expert, recent reports."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.http import Http404

from experts.models import ExpertVersion
from jobs.models import Job

from . import schedule_words, scheduling
from .choices import ROUTER_WIDE_ALARMS
from .models import Alarm, DriftReport, EvaluationSnapshot


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
        built_in = schedule_words.BUILT_IN.get(task.task)
        if cron:
            when = schedule_words.crontab_words(*(getattr(cron, f) for f in scheduling.CRON_FIELDS))
        elif task.interval:
            when = schedule_words.interval_words(task.interval.every, task.interval.period)
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

    task = PeriodicTask.objects.filter(pk=pk).first()
    if task is None:
        raise Http404("no such schedule")
    return task


def experiment_choices(experts: Any, include_router: bool) -> tuple[list[tuple[str, str, list[tuple[int, str]]]], list[tuple[int, str]]]:
    """What the new-experiment form offers: each expert's versions ("v3, serving now") and the router's (staff only)."""
    from routing.models import RouterVersion

    by_expert: dict[str, tuple[str, list[tuple[int, str]]]] = {}
    for expert in experts.order_by("name"):
        by_expert[expert.slug] = (expert.name, [])
    rows = ExpertVersion.objects.filter(expert__in=experts).exclude(status="failed").order_by("expert__slug", "-version")
    for slug, number, status in rows.values_list("expert__slug", "version", "status"):
        if slug in by_expert:
            by_expert[slug][1].append((number, f"v{number}, {'serving now' if status == 'active' else status}"))
    router: list[tuple[int, str]] = []
    if include_router:
        router = [(v, f"v{v}{', serving now' if active else ''}") for v, active in RouterVersion.objects.order_by("-version").values_list("version", "is_active")]
    return [(slug, name, versions) for slug, (name, versions) in by_expert.items()], router


def visible_alarms(visible: set[str] | None = None) -> QuerySet[Alarm]:
    """The alarms shown to a user who may see the experts ``visible`` (``None``: staff, every alarm).

    An alarm is shown by what it concerns, whatever its subject (an expert's slug, an experiment's
    number, a router version): the experts recorded on it when it was raised (``Alarm.experts``:
    an experiment's alarm names the experts of its arms). A user sees it when one of those experts
    is one they may see. An alarm about the router as a whole (drift, a router candidate:
    ``ROUTER_WIDE_ALARMS``) that names no expert carries no team's data (router versions, drift
    statistics) and concerns every team's questions, so every signed-in user sees it; any other
    alarm that names no expert (an uncovered cluster near no expert, whose examples are any team's
    questions) is staff's only.
    """
    alarms = Alarm.objects.all()
    if visible is None:
        return alarms
    router_wide = Q(kind__in=sorted(ROUTER_WIDE_ALARMS), experts=[])
    if not visible:
        return alarms.filter(router_wide)
    # A JSON list of slugs, matched as text: each slug is a quoted string in it (slugs hold no quotes).
    names_one = Q(experts_text__regex='"(' + "|".join(re.escape(s) for s in sorted(visible)) + ')"')
    return alarms.alias(experts_text=Cast("experts", TextField())).filter(router_wide | names_one)


def recent_drift_reports(limit: int = 10) -> list[DriftReport]:
    return list(DriftReport.objects.all()[:limit])


def recent_snapshots(limit: int = 14) -> list[EvaluationSnapshot]:
    return list(EvaluationSnapshot.objects.all()[:limit])
