"""Scheduled jobs: what beat fires, how a firing is claimed once, and the default schedules.

The Celery task names (``experiments.fire_schedule``, ``experiments.run_scheduled``) and the
``ScheduledRun`` table keep the experiments app's name, where the schedules began: beat's rows and
queued messages name them.

Beat sends ``experiments.fire_schedule(name)``; that task claims the row ``ScheduledRun(task=name,
slot=<the period it belongs to>)`` (unique: a second firing in the same period, from a duplicated
beat or a redelivered message, finds it taken and does nothing) and enqueues one Job through
``enqueue_once`` (one active job per schedule name), which a worker runs with ``run_job`` (acks late:
a worker killed mid-job gets the message again and ``claim`` lets it resume). The Job row records
the outcome, shown on the jobs page and next to the schedule in the console.

``DEFAULTS`` is the one table of schedules: each names the function of ``routines`` that does its
work. ``run_scheduled``, the task a firing enqueues, is defined here next to ``fire`` (and exported by
``tasks``), so the imports go one way: tasks -> scheduling -> routines.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import shared_task
from celery.schedules import crontab
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs.models import Job
from jobs.services import JobFailed, JobReporter, enqueue_once, run_job

from . import routines
from .models import ScheduledRun

TASK_NAME = "experiments.fire_schedule"


Work = Callable[[Job, JobReporter], dict[str, Any] | None]


@dataclass(frozen=True)
class Schedule:
    """A default schedule: its crontab (minute hour day_of_month month_of_year day_of_week), what it does, and the work that does it."""

    name: str
    title: str
    cron: str
    description: str
    work: Work


DEFAULTS: tuple[Schedule, ...] = (
    Schedule("retrain_router", "Retrain the router", "0 3 * * 1", "Weekly: train on reviewed labels; activate only if it beats the active router on the same held-out set.",
             routines.retrain_router),
    Schedule("recluster", "Re-cluster the query log", "0 4 1 * *", "Monthly: cluster recent queries into proposals to review; uncovered dense clusters become proposals.",
             routines.recluster),
    Schedule("refresh_knowledge", "Refresh knowledge bases", "30 2 * * *", "Nightly: index every document whose content changed or never indexed.",
             routines.refresh_knowledge),
    Schedule("nightly_evaluation", "Nightly evaluation", "0 1 * * *", "Router accuracy on held-out reviewed questions, traffic shares and online rates, stored over time.",
             routines.nightly_evaluation),
    Schedule("drift_check", "Drift check", "0 5 * * *", "Daily: recent questions against the router's training distribution.", routines.drift_check),
    Schedule("load_check", "Load alarm check", "15 * * * *", "Hourly: an expert answering more than its alarm share of a week's traffic raises an alarm.", routines.load_check),
    Schedule("srm_check", "Experiment SRM check", "45 * * * *", "Hourly: sample-ratio mismatch of running experiments.", routines.srm_check),
    Schedule("event_retention", "Routing event retention", "30 0 * * *", "Daily: delete routing events (traces) older than the retention period.",
             routines.event_retention),
)
BY_NAME = {s.name: s for s in DEFAULTS}


class InvalidCrontab(ValueError):
    """A crontab expression celery cannot parse; ``field`` names the part that is wrong."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")


def validate_crontab(**parts: str) -> dict[str, str]:
    """Check each crontab field with celery's own parser (``celery.schedules.crontab``); returns the cleaned fields.

    Raises:
        InvalidCrontab: naming the first field celery rejects.
    """
    cleaned = {}
    for name in CRON_FIELDS:
        value = (parts.get(name) or "*").strip()
        if not value or any(c.isspace() for c in value):
            raise InvalidCrontab(f"{name.replace('_', ' ')}: one expression without spaces (e.g. '*', '0', '*/15', '1-5')", name)
        try:
            crontab(**{name: value})
        except (ValueError, TypeError, IndexError) as exc:
            raise InvalidCrontab(f"{name.replace('_', ' ')} {value!r} is not a valid crontab field: {exc}", name) from exc
        cleaned[name] = value
    return cleaned


def parse_cron(expr: str) -> dict[str, str]:
    parts = expr.split()
    if len(parts) != 5:
        raise InvalidCrontab(f"a crontab has 5 fields (minute hour day-of-month month day-of-week); got {len(parts)}", "minute")
    return validate_crontab(**dict(zip(CRON_FIELDS, parts, strict=True)))


def ensure_schedules(timezone_name: str = "UTC") -> list[tuple[str, bool]]:
    """Create the default PeriodicTasks that do not exist yet (idempotent; edited schedules are left alone)."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    out = []
    for s in DEFAULTS:
        if PeriodicTask.objects.filter(name=f"switchboard:{s.name}").exists():
            out.append((s.name, False))
            continue
        cron, _ = CrontabSchedule.objects.get_or_create(**parse_cron(s.cron), timezone=timezone_name)
        PeriodicTask.objects.get_or_create(
            name=f"switchboard:{s.name}",
            defaults={"task": TASK_NAME, "crontab": cron, "kwargs": json.dumps({"name": s.name}), "description": s.description},
        )
        out.append((s.name, True))
    return out


@transaction.atomic
def save_crontab(task: Any, data: dict[str, Any]) -> None:
    """Point the PeriodicTask ``task`` at the (shared) CrontabSchedule row with these fields and set its enabled flag."""
    from django_celery_beat.models import CrontabSchedule

    tz = task.crontab.timezone if task.crontab else "UTC"
    cron, _ = CrontabSchedule.objects.get_or_create(timezone=tz, **{f: data[f] for f in CRON_FIELDS})
    task.crontab, task.interval, task.enabled = cron, None, bool(data.get("enabled"))
    task.save()


# --- firing ----------------------------------------------------------------------------------------

def slot_for(now: Any, slot_seconds: int) -> str:
    """The period a firing belongs to: the time floored to ``slot_seconds`` (a minute by default, cron's granularity)."""
    stamp = int(now.timestamp()) // max(1, slot_seconds) * max(1, slot_seconds)
    return str(stamp)


def fire(name: str, *, slot_seconds: int = 60, now: Any = None) -> Job | None:
    """Claim this period's firing of schedule ``name`` and enqueue its job; None when already claimed.

    Raises:
        KeyError: an unknown schedule name (a PeriodicTask edited by hand to something we do not run).
    """
    if name not in BY_NAME:
        raise KeyError(f"unknown schedule {name!r}")
    slot = slot_for(now or timezone.now(), slot_seconds)
    # The claim and the job commit together: a worker killed in between leaves neither, and the
    # redelivered message (acks late) claims the period again.
    with transaction.atomic():
        try:
            with transaction.atomic():
                run = ScheduledRun.objects.create(task=name, slot=slot)
        except IntegrityError:
            return None
        job = enqueue_once(f"scheduled_{name}", f"scheduled:{name}", BY_NAME[name].title, run_scheduled, {"schedule": name, "slot": slot})
        run.job = job
        run.save(update_fields=["job"])
    return job


def last_outcome(name: str) -> Job | None:
    """The most recent job of schedule ``name`` (its status, result or error)."""
    return Job.objects.filter(kind=f"scheduled_{name}").order_by("-created_at", "-id").first()


def _dispatch(job: Job, reporter: JobReporter) -> dict[str, Any] | None:
    schedule = BY_NAME.get(job.params.get("schedule", ""))
    if schedule is None:
        raise JobFailed(f"unknown scheduled job {job.params.get('schedule', '')!r}")
    return schedule.work(job, reporter)


@shared_task(name="experiments.run_scheduled", bind=True, acks_late=True, max_retries=1)
def run_scheduled(self, job_id: int) -> None:
    """Run one scheduled job's work and record its outcome on the Job row."""
    run_job(job_id, _dispatch)
