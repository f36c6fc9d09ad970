"""The schedules page: the schedules in words with their next run, editing a crontab (staff only)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from ..conftest import PASSWORD

pytestmark = pytest.mark.django_db


def test_schedules_page_lists_and_edits_with_validation(admin_client):
    call_command("ensure_schedules", verbosity=0)
    assert "Retrain the router" in admin_client.get(reverse("console-schedules")).content.decode()
    task = PeriodicTask.objects.get(name="switchboard:retrain_router")
    url = reverse("console-schedule-edit", args=[task.pk])
    bad = admin_client.post(url, {"minute": "61", "hour": "3", "day_of_month": "*", "month_of_year": "*", "day_of_week": "1", "enabled": "on"})
    assert bad.status_code == 400
    assert "Invalid end range" in bad.content.decode()
    good = admin_client.post(url, {"minute": "30", "hour": "2", "day_of_month": "*", "month_of_year": "*", "day_of_week": "0"})
    assert good.status_code == 302
    task.refresh_from_db()
    assert (task.crontab.minute, task.crontab.hour, task.crontab.day_of_week, task.enabled) == ("30", "2", "0", False)
    assert f"Schedule {task.name} saved." in admin_client.get(good["Location"]).content.decode()  # the page it lands on says so


def test_a_non_staff_user_cannot_edit_a_schedule(client, owner):
    call_command("ensure_schedules", verbosity=0)
    client.login(username=owner.username, password=PASSWORD)
    task = PeriodicTask.objects.first()
    assert client.post(reverse("console-schedule-edit", args=[task.pk]), {"minute": "1"}).status_code == 403


@pytest.mark.parametrize(("fields", "words"), [
    (("0", "3", "*", "*", "1"), "every Monday at 03:00"),
    (("30", "2", "*", "*", "*"), "every day at 02:30"),
    (("15", "*", "*", "*", "*"), "every hour at 15 minutes past"),
    (("0", "4", "1", "*", "*"), "on the 1st of every month at 04:00"),
    (("*/5", "9-17", "*", "*", "1-5"), "minute */5, hour 9-17, day of month *, month *, day of week 1-5"),
])
def test_a_crontab_reads_in_words(fields, words):
    from routing.schedules.words import crontab_words

    assert crontab_words(*fields) == words


def test_schedules_read_in_words_with_their_next_run_and_no_internal_names(admin_client):
    from django_celery_beat.models import IntervalSchedule

    call_command("ensure_schedules", verbosity=0)
    every_day = IntervalSchedule.objects.create(every=86400, period="seconds")
    PeriodicTask.objects.create(name="celery.backend_cleanup", task="celery.backend_cleanup", interval=every_day)
    page = admin_client.get(reverse("console-schedules")).content.decode()
    assert "Every Monday at 03:00" in page  # the router's weekly retraining
    assert "next " in page
    assert "Every day" in page
    assert "every every" not in page
    assert "Clean up old task results" in page
    assert "ROUTER_ALARM_SHARE" not in page
    assert "Day of week (0 = Sunday)" in page  # the crontab fields are labelled
