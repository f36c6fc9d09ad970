"""Retry and cancel from the console, and who sees which job (teams)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs import services
from jobs.models import Job
from routing import tasks
from tests.factories import make_user, roads_and_pensions

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("admin", "admin@example.com", "pw-admin-1234", is_staff=True)


@pytest.fixture
def sent(monkeypatch):
    """Task messages caught instead of sent (the job rows are what these tests look at)."""
    caught: list[int] = []
    monkeypatch.setattr(tasks.train_router, "delay", lambda job_id: caught.append(job_id))
    monkeypatch.setattr(tasks.train_router, "apply_async", lambda args, **kwargs: caught.append(args[0]))
    return caught


def test_a_failed_job_is_retried_as_a_new_attempt_once(client, staff, sent, django_capture_on_commit_callbacks):
    failed = Job.objects.create(kind="train_router", key="train_router", title="Train router", status="failed", params={"seed": 3}, error="boom",
                                task_name=tasks.train_router.name)
    client.force_login(staff)
    assert 'id="job-retry"' in client.get(reverse("console-job", args=[failed.pk])).content.decode()

    with django_capture_on_commit_callbacks(execute=True):
        first = client.post(reverse("console-job-retry", args=[failed.pk]))
        second = client.post(reverse("console-job-retry", args=[failed.pk]))

    attempt = Job.objects.exclude(pk=failed.pk).get()
    assert first["Location"] == second["Location"] == reverse("console-job", args=[attempt.pk])
    assert (attempt.kind, attempt.key, attempt.params, attempt.status, attempt.created_by) == ("train_router", "train_router", {"seed": 3}, "queued", staff)
    assert sent == [attempt.pk]
    failed.refresh_from_db()
    assert failed.status == "failed"  # the old attempt keeps its record


def test_a_running_job_cannot_be_retried(client, staff):
    running = Job.objects.create(kind="train_router", key="k", title="Train router", status="running")
    client.force_login(staff)

    response = client.post(reverse("console-job-retry", args=[running.pk]), follow=True)

    assert Job.objects.count() == 1
    assert "can be retried" in response.content.decode()


def test_cancelling_a_queued_job_means_no_worker_ever_claims_it(client, staff):
    job = Job.objects.create(kind="train_router", key="k", title="Train router")
    client.force_login(staff)

    response = client.post(reverse("console-job-cancel", args=[job.pk]))

    assert response.status_code == 302
    job.refresh_from_db()
    assert job.status == "cancelled"
    assert job.finished_at is not None
    assert "admin" in job.message
    assert services.claim(job.pk) is None


def test_a_running_job_stops_at_its_next_progress_report_and_stays_cancelled(staff):
    job = Job.objects.create(kind="train_router", key="k", title="Train router")
    seen = []

    def work(job, reporter):
        reporter.progress(0.2, "epoch 1")
        services.cancel_job(job, user=staff)  # as the console would, from another request
        seen.append("cancelled")
        reporter.progress(0.4, "epoch 2")
        seen.append("kept going")
        return {"never": "stored"}

    services.run_job(job.pk, work)

    job.refresh_from_db()
    assert seen == ["cancelled"]
    assert job.status == "cancelled"
    assert job.result == {}
    assert job.progress == pytest.approx(0.2)


def test_a_finished_job_is_not_cancelled(client, staff):
    job = Job.objects.create(kind="train_router", key="k", title="Train router", status="succeeded")
    client.force_login(staff)

    client.post(reverse("console-job-cancel", args=[job.pk]))

    job.refresh_from_db()
    assert job.status == "succeeded"


def test_cancel_and_retry_need_post(client, staff):
    job = Job.objects.create(kind="train_router", key="k", title="Train router")
    client.force_login(staff)
    assert client.get(reverse("console-job-cancel", args=[job.pk])).status_code == 405
    assert client.get(reverse("console-job-retry", args=[job.pk])).status_code == 405


@pytest.fixture
def team_jobs():
    roads, _ = roads_and_pensions()
    member = make_user("rita", teams=(roads,))
    own = Job.objects.create(kind="index_documents", key="index:dmv", title="Index dmv", params={"expert": "dmv"},
                             task_name="knowledge.tasks.index_expert_documents")
    other = Job.objects.create(kind="index_documents", key="index:ssa", title="Index ssa", params={"expert": "ssa"})
    platform = Job.objects.create(kind="train_router", key="train_router", title="Train router")
    return member, own, other, platform


def test_a_team_member_sees_their_experts_jobs_and_platform_jobs_but_not_another_teams(client, team_jobs):
    member, own, other, platform = team_jobs
    client.force_login(member)

    listed = {job.pk for job in client.get(reverse("console-jobs")).context["jobs"]}

    assert listed == {own.pk, platform.pk}
    assert client.get(reverse("console-job", args=[other.pk])).status_code == 404
    assert client.post(reverse("console-job-cancel", args=[other.pk])).status_code == 404


def test_a_team_member_may_cancel_their_experts_job_but_not_a_platform_job(client, team_jobs):
    member, own, _other, platform = team_jobs
    client.force_login(member)

    assert client.post(reverse("console-job-cancel", args=[own.pk])).status_code == 302
    assert client.post(reverse("console-job-cancel", args=[platform.pk])).status_code == 403
    own.refresh_from_db()
    platform.refresh_from_db()
    assert (own.status, platform.status) == ("cancelled", "queued")


def test_the_list_offers_retry_and_cancel_where_the_user_may_act(client, team_jobs):
    member, own, other, platform = team_jobs
    Job.objects.filter(pk=own.pk).update(status="failed")
    client.force_login(member)

    body = client.get(reverse("console-jobs")).content.decode()

    assert f'action="/jobs/{own.pk}/retry/"' in body
    assert f'action="/jobs/{platform.pk}/cancel/"' not in body  # a platform job: staff or its creator
    assert f"/jobs/{other.pk}/" not in body
