"""The daily backup: beat's task runs a backup job into BACKUP_DIR that keeps the last BACKUP_KEEP, shown on the Schedules page."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from jobs.choices import JobStatus
from jobs.models import Job
from operations import tasks
from operations.services import SCHEDULE_NAME, ensure_backup_schedule, prune_backups
from tests.operations.conftest import use_data_folder


def _complete(folder):
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    return folder


def test_pruning_keeps_the_newest_complete_backups_and_drops_half_written_ones(tmp_path):
    names = ["20260101T000000Z", "20260102T000000Z", "20260103T000000Z", "20260104T000000Z"]
    for name in names:
        _complete(tmp_path / name)
    (tmp_path / "20260102T120000Z" / ".partial").mkdir(parents=True)  # a backup that was interrupted
    (tmp_path / "20260105T000000Z" / ".partial").mkdir(parents=True)  # the one being written now
    removed = prune_backups(tmp_path, keep=2, current=tmp_path / "20260105T000000Z")
    assert sorted(p.name for p in removed) == ["20260101T000000Z", "20260102T000000Z", "20260102T120000Z"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["20260103T000000Z", "20260104T000000Z", "20260105T000000Z"]


def test_the_beat_task_runs_a_backup_job_that_keeps_the_last_backups(tmp_path, settings, transactional_db, django_capture_on_commit_callbacks):
    use_data_folder(settings, tmp_path / "var")
    settings.BACKUP_KEEP = 2
    old = [_complete(settings.BACKUP_DIR / f"2026010{i}T000000Z") for i in (1, 2)]
    with django_capture_on_commit_callbacks(execute=True):
        job_id = tasks.backup()
    job = Job.objects.get(pk=job_id)
    assert job.status == JobStatus.SUCCEEDED, job.error
    made = settings.BACKUP_DIR / job.result["backup"].rsplit("/", 1)[-1]
    assert json.loads((made / "manifest.json").read_text())["database"]["engine"] == "sqlite"
    assert job.result["removed"] == [old[0].name]
    assert sorted(p.name for p in settings.BACKUP_DIR.iterdir()) == [old[1].name, made.name]


@pytest.mark.django_db
def test_the_schedule_is_created_once_and_listed_on_the_schedules_page(admin_client):
    assert ensure_backup_schedule() is True
    task = PeriodicTask.objects.get(name=SCHEDULE_NAME)
    task.enabled = False  # edited on the page: left alone
    task.save()
    assert ensure_backup_schedule() is False
    assert PeriodicTask.objects.get(name=SCHEDULE_NAME).enabled is False
    page = admin_client.get(reverse("console-schedules")).content.decode()
    assert "Back up the data" in page
    assert "keeping the last BACKUP_KEEP" in page
