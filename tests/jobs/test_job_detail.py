"""One job's page: its log, error and result."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def console(client, owner):
    client.force_login(owner)
    return client


def test_the_job_page_shows_log_error_and_result(console):
    job = Job.objects.create(
        kind="train_router", key="a", title="Train the router", status="failed", progress=0.9,
        log="loading data\ntraining <fast>", error="Traceback: JobFailed", result={"router_version": 2, "accuracy": 0.95},
    )

    response = console.get(reverse("console-job", args=[job.pk]))

    assert response.status_code == 200
    html = response.content.decode()
    assert "loading data\ntraining &lt;fast&gt;" in html
    assert "Traceback: JobFailed" in html
    assert "&quot;router_version&quot;: 2" in html  # pretty-printed JSON, escaped
    assert "hx-trigger" not in html  # a finished job does not poll


def test_the_job_body_polls_while_the_job_runs(console):
    job = Job.objects.create(kind="train_router", key="a", title="Train the router", status="running", progress=0.3)

    html = console.get(reverse("console-job-body", args=[job.pk]), headers={"HX-Request": "true"}).content.decode()

    assert "<html" not in html
    assert f'hx-get="/jobs/{job.pk}/body/"' in html
    assert "Not finished yet." in html


def test_the_job_page_is_404_for_an_unknown_job(console):
    assert console.get(reverse("console-job", args=[999])).status_code == 404
