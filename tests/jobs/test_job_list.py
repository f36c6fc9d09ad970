"""The console's job list: rows with progress, and a table body that polls only while a job is active."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.models import Job

pytestmark = pytest.mark.django_db


def test_the_job_list_shows_each_job_with_its_progress(console):
    Job.objects.create(kind="train_router", key="a", title="Train the router", status="running", progress=0.42, message="epoch 3 of 8")
    Job.objects.create(kind="index_documents", key="b", title="Index documents", status="succeeded", progress=1.0, finished_at=timezone.now())

    response = console.get(reverse("console-jobs"))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Train the router" in html
    assert '<progress value="42" max="100"' in html
    assert "42%" in html
    assert "epoch 3 of 8" in html
    assert '<progress value="100" max="100"' in html


def test_the_rows_partial_renders_progress_and_polls_while_a_job_is_active(console):
    Job.objects.create(kind="train_router", key="a", title="Train the router", status="running", progress=0.25)

    response = console.get(reverse("console-job-rows"), headers={"HX-Request": "true"})

    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html
    assert '<progress value="25" max="100"' in html
    assert 'hx-get="/jobs/rows/"' in html
    assert 'hx-trigger="every 2s"' in html


def test_the_rows_partial_stops_polling_when_no_job_is_active(console):
    Job.objects.create(kind="train_router", key="a", title="Train the router", status="succeeded", progress=1.0)
    Job.objects.create(kind="train_router", key="b", title="Train again", status="failed", progress=0.5)

    html = console.get(reverse("console-job-rows")).content.decode()

    assert "Train the router" in html
    assert "hx-trigger" not in html


def test_the_job_list_says_when_there_are_no_jobs(console):
    html = console.get(reverse("console-jobs")).content.decode()
    assert "No jobs yet." in html
    assert "hx-trigger" not in html
