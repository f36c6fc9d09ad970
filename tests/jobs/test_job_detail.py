"""One job's page: its log, error and result."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import Job
from tests.factories import make_expert

pytestmark = pytest.mark.django_db


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


def test_the_job_body_names_the_worker_running_the_job_and_when_it_was_last_heard(console):
    from datetime import timedelta

    from django.utils import timezone

    heard = timezone.now() - timedelta(minutes=2, seconds=5)
    job = Job.objects.create(kind="train_router", key="a", title="Train the router", status="running", claimed_by="gpu-3:4242", heartbeat_at=heard)

    html = console.get(reverse("console-job-body", args=[job.pk]), headers={"HX-Request": "true"}).content.decode()

    stamp = timezone.localtime(heard).strftime("%H:%M:%S")
    assert f"<dt>Worker</dt><dd><code>gpu-3:4242</code>, last heard at {stamp}</dd>" in html
    assert console.get(reverse("console-job-body", args=[Job.objects.create(kind="k", key="q", title="Queued").pk]),
                       headers={"HX-Request": "true"}).content.decode().count("<dt>Worker</dt>") == 0
    requeued = Job.objects.create(kind="k", key="r", title="Queued again", claimed_by="gpu-3:4242", queue="gpu")  # its worker was lost
    html = console.get(reverse("console-job-body", args=[requeued.pk]), headers={"HX-Request": "true"}).content.decode()
    assert "<dt>Last worker</dt><dd><code>gpu-3:4242</code></dd>" in html
    assert "<dt>Queue</dt><dd><code>gpu</code></dd>" in html


def test_the_job_page_is_404_for_an_unknown_job(console):
    assert console.get(reverse("console-job", args=[999])).status_code == 404


def test_a_finished_job_links_to_what_it_made_and_summarises_its_result(console):
    from routing.models import RouterVersion, TrainingRun

    job = Job.objects.create(kind="train_router", key="b", title="Train the router", status="succeeded", progress=1.0,
                             result={"router_version": 3, "val_accuracy": 0.912, "abstain_threshold": 0.31})
    version = RouterVersion.objects.create(version=3, path="/nowhere", experts=["dmv", "ssa"], embedding_model="m", data_fingerprint="f")
    run = TrainingRun.objects.create(job_id=job.pk, params={}, history=[], metrics={}, n_train=10, n_val=2, router_version=version)
    html = console.get(reverse("console-job", args=[job.pk])).content.decode()
    assert f'href="{reverse("console-training-run", args=[run.pk])}">Training run {run.pk} (router v3)</a>' in html
    assert "<dt>Val accuracy</dt><dd>0.912</dd>" in html  # the figures, not only raw JSON
    assert "This job logged nothing." in html


    make_expert("dmv", "DMV", public=False)  # no team: everyone signed in sees its jobs
    adapter = Job.objects.create(kind="train_adapter", key="c", title="Train", status="succeeded", params={"expert": "dmv"}, result={"version": 2})
    assert "dmv&#x27;s adapters: version 2" in console.get(reverse("console-job", args=[adapter.pk])).content.decode()
