"""Jobs are retried by the task name their row recorded; migration 0003 filled it in on older rows."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.urls import reverse

from jobs.models import Job

pytestmark = pytest.mark.django_db

fill = importlib.import_module("jobs.migrations.0003_fill_task_name")


def test_the_migration_fills_the_task_name_of_older_rows_from_their_kind():
    old = Job.objects.create(kind="train_router", key="a", title="t")
    recorded = Job.objects.create(kind="train_router", key="b", title="t", task_name="tests.some_task")
    unknown = Job.objects.create(kind="train_adapter", key="c", title="t")

    fill.fill_task_name(apps, None)

    assert Job.objects.get(pk=old.pk).task_name == "routing.tasks.train_router"
    assert Job.objects.get(pk=recorded.pk).task_name == "tests.some_task"
    assert Job.objects.get(pk=unknown.pk).task_name == ""


def test_a_job_without_a_recorded_task_is_not_offered_a_retry_and_says_why(client, django_user_model):
    staff = django_user_model.objects.create_user("admin", "admin@example.com", "pw-admin-1234", is_staff=True)
    job = Job.objects.create(kind="train_router", key="k", title="Train router", status="failed", error="boom")
    client.force_login(staff)

    assert 'id="job-retry"' not in client.get(reverse("console-job", args=[job.pk])).content.decode()
    response = client.post(reverse("console-job-retry", args=[job.pk]), follow=True)

    assert Job.objects.count() == 1
    assert "records no task" in response.content.decode()
