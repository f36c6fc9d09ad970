"""The scheduled backup: a job that backs up into ``BACKUP_DIR`` and keeps the last ``BACKUP_KEEP`` backups.

Beat fires ``operations.backup`` on the "Back up the data" schedule (created once by
``ensure_backup_schedule``, which ``run_platform`` calls; staff edit or disable it on the Schedules
page); the task enqueues one ``backup`` job (one at a time), which a worker runs with ``run_job``.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings

from jobs.models import Job
from jobs.services import JobFailed, JobReporter

from .backup import MANIFEST, BackupRefused, backup

SCHEDULE_NAME = "Back up the data"  # the Schedules page shows a PeriodicTask of no default schedule by its name
TASK_NAME = "operations.backup"
# Daily at 03:45 UTC: after the nightly refresh of the knowledge bases (02:30) and the router's weekly retraining (03:00).
DEFAULT_CRON = {"minute": "45", "hour": "3", "day_of_month": "*", "month_of_year": "*", "day_of_week": "*"}
DESCRIPTION = "Daily: back up the database, vector collections, routers and adapters into BACKUP_DIR, keeping the last BACKUP_KEEP."


def prune_backups(root: Path, keep: int, current: Path | None = None) -> list[Path]:
    """Remove all but the ``keep`` newest complete backups under ``root`` (named by their UTC time, so they sort by age),
    and every half-written one but ``current``; returns what was removed."""
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    complete = [p for p in folders if (p / MANIFEST).is_file()]
    removed = [p for p in folders if p not in complete and p != current] + complete[: max(0, len(complete) - keep)]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def scheduled_backup(job: Job, reporter: JobReporter) -> dict[str, Any]:
    """Back up into a new folder of ``BACKUP_DIR`` named by the time, then keep the last ``BACKUP_KEEP``."""
    root = Path(settings.BACKUP_DIR)
    dest = root / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        manifest = backup(dest, say=reporter.log)
    except BackupRefused as exc:
        raise JobFailed(str(exc)) from exc
    removed = prune_backups(root, settings.BACKUP_KEEP, current=dest)
    reporter.log(f"kept the last {settings.BACKUP_KEEP} backups in {root}; removed {len(removed)}")
    return {"backup": str(dest), "bytes": manifest["bytes"], "seconds": manifest["seconds"], "removed": [p.name for p in removed]}


def ensure_backup_schedule(timezone_name: str = "UTC") -> bool:
    """Create the daily backup's PeriodicTask unless it exists (an edited or disabled one is left alone); True when created."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    if PeriodicTask.objects.filter(name=SCHEDULE_NAME).exists():
        return False
    cron, _ = CrontabSchedule.objects.get_or_create(**DEFAULT_CRON, timezone=timezone_name)
    PeriodicTask.objects.get_or_create(name=SCHEDULE_NAME, defaults={"task": TASK_NAME, "crontab": cron, "kwargs": json.dumps({}), "description": DESCRIPTION})
    return True
