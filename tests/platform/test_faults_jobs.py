"""Jobs survive a broker outage and killed workers: nothing is lost, nothing runs twice at once.

The broker is made unreachable for real (a Redis URL on a port where nothing listens); a killed
worker is a Job row left running with an old heartbeat, or claimed by a process of this machine that
is gone (the subprocess versions, with SIGKILL and a real worker restarting, are in
tests/integration/test_faults_worker_killed.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest
from celery import shared_task
from django.utils import timezone

from jobs import services
from jobs.choices import JobStatus
from jobs.models import Job
from switchboard.celery import app, recover_jobs_on_start

RUNS: list[int] = []


@shared_task(name="tests.reliability.record_run", acks_late=True)
def record_run(job_id: int) -> None:
    """A job whose work is to note that it ran (and how often)."""
    services.run_job(job_id, lambda job, reporter: RUNS.append(job.pk) or {"ran": True})


@pytest.fixture(autouse=True)
def _clear_runs():
    RUNS.clear()


@pytest.fixture
def broker_down(monkeypatch):
    """A real broker connection that is refused: Redis on the discard port, not eager."""
    saved = {key: app.conf[key] for key in ("task_always_eager", "broker_url")}
    _forget_connections()
    app.conf.update(task_always_eager=False, broker_url="redis://127.0.0.1:9/0")
    yield
    app.conf.update(saved)
    _forget_connections()


def _forget_connections() -> None:
    """Drop the app's connection and producer pools, so the next publish connects to the configured broker."""
    app._pool = None
    app.amqp._producer_pool = None


def test_enqueueing_while_the_broker_is_down_keeps_the_job_queued_and_does_not_fail(db, broker_down, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = services.enqueue_once("test", "broker-down", "Runs later", record_run)
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert job.dispatched_at is None
    assert job.task_name == "tests.reliability.record_run"
    assert RUNS == []


def test_the_sweeper_sends_an_undelivered_job_once_the_broker_is_back(db, settings, broker_down, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = services.enqueue_once("test", "broker-down", "Runs later", record_run)
    assert services.sweep(timezone.now() + timedelta(seconds=settings.JOB_DISPATCH_GRACE_S + 1)) == {"resent": 0, "requeued": 0, "failed": 0}
    app.conf.update(task_always_eager=True)  # the broker is back (in-process delivery)
    counts = services.sweep(timezone.now() + timedelta(seconds=settings.JOB_DISPATCH_GRACE_S + 1))
    assert counts["resent"] == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert RUNS == [job.pk]  # ran exactly once
    assert services.sweep(timezone.now() + timedelta(hours=1))["resent"] == 0  # nothing left to send


def test_a_job_sent_to_a_queue_is_sent_there_again_by_the_sweeper_and_by_a_retry(db, settings, broker_down, monkeypatch,
                                                                                    django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = services.enqueue_once("test", "to-gpu", "Runs on a GPU worker", record_run.s().set(queue="gpu"))
    assert Job.objects.get(pk=job.pk).queue == "gpu"
    sent: list[tuple[str, dict]] = []
    monkeypatch.setattr(app, "send_task", lambda name, **kwargs: sent.append((name, kwargs)))  # the broker is back
    assert services.sweep(timezone.now() + timedelta(seconds=settings.JOB_DISPATCH_GRACE_S + 1))["resent"] == 1
    assert sent == [(record_run.name, {"args": (job.pk,), "retry": False, "queue": "gpu"})]  # not the task's default queue

    Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED)
    app.conf.update(task_always_eager=True)
    again = services.retry_job(Job.objects.get(pk=job.pk), record_run)
    assert again.pk != job.pk
    assert again.queue == "gpu"


def test_a_job_delivered_a_moment_ago_is_not_sent_twice(db, settings):
    job = Job.objects.create(kind="test", key="fresh", title="x", task_name=record_run.name)
    assert services.sweep()["resent"] == 0  # within the grace period the first message may still be on its way
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED


def _running(attempts: int, seen_ago: timedelta) -> Job:
    stamp = timezone.now() - seen_ago
    return Job.objects.create(kind="test", key=f"run-{attempts}-{seen_ago}", title="x", status=JobStatus.RUNNING, attempts=attempts,
                              task_name=record_run.name, started_at=stamp, heartbeat_at=stamp, dispatched_at=stamp)


def test_a_job_whose_worker_died_is_queued_again_and_run_to_the_end(db, settings):
    job = _running(attempts=1, seen_ago=timedelta(seconds=settings.JOB_LEASE_S + 5))
    counts = services.sweep()
    assert counts["requeued"] == 1
    assert counts["resent"] == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert job.attempts == 2
    assert "worker lost" in job.log
    assert RUNS == [job.pk]


def test_a_job_whose_worker_is_alive_is_left_alone_and_a_duplicate_message_cannot_claim_it(db, settings):
    job = _running(attempts=1, seen_ago=timedelta(seconds=5))
    assert services.sweep() == {"resent": 0, "requeued": 0, "failed": 0}
    record_run.apply((job.pk,))  # a redelivered message while the first worker still runs it
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    assert job.attempts == 1
    assert RUNS == []


def test_a_job_that_lost_its_worker_too_often_is_failed_with_a_reason(db, settings):
    job = _running(attempts=settings.JOB_MAX_ATTEMPTS, seen_ago=timedelta(seconds=settings.JOB_LEASE_S + 5))
    counts = services.sweep()
    assert counts["failed"] == 1
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "stopped responding" in job.error
    assert RUNS == []


def _dead_pid() -> int:
    """The pid of a process of this machine that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _claimed(claimed_by: str, attempts: int = 1) -> Job:
    """A running job with a fresh heartbeat: the lease alone would leave it alone for minutes."""
    job = _running(attempts=attempts, seen_ago=timedelta(seconds=1))
    Job.objects.filter(pk=job.pk).update(claimed_by=claimed_by)
    return job


def test_claiming_a_job_records_the_process_that_runs_it(db):
    job = Job.objects.create(kind="test", key="who", title="x", task_name=record_run.name)
    services.claim(job.pk)
    job.refresh_from_db()
    assert job.claimed_by == f"{socket.gethostname()}:{os.getpid()}"


def test_a_job_whose_process_on_this_machine_is_gone_is_queued_again_at_once(db, settings):
    job = _claimed(f"{socket.gethostname()}:{_dead_pid()}")
    counts = services.sweep()
    assert counts["requeued"] == 1
    assert counts["resent"] == 1  # sent at once, not after the dispatch grace
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert job.attempts == 2
    assert "is gone" in job.log
    assert RUNS == [job.pk]


def test_a_job_run_by_a_live_process_or_on_another_machine_waits_for_its_lease(db):
    alive = _claimed(f"{socket.gethostname()}:{os.getppid()}")
    elsewhere = _claimed(f"not-{socket.gethostname()}:{_dead_pid()}")
    mine = _claimed(f"{socket.gethostname()}:{os.getpid()}")  # a thread of this very process may be running it
    assert services.sweep() == {"resent": 0, "requeued": 0, "failed": 0}
    for job in (alive, elsewhere, mine):
        job.refresh_from_db()
        assert job.status == JobStatus.RUNNING
    assert RUNS == []


def test_a_worker_starting_requeues_what_an_earlier_process_with_its_pid_left_running(db):
    job = _claimed(f"{socket.gethostname()}:{os.getpid()}")  # a restarted container numbers its processes alike
    recover_jobs_on_start()  # the worker_ready receiver: the worker has claimed nothing yet
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert job.attempts == 2
    assert RUNS == [job.pk]


def test_a_job_whose_process_is_gone_too_often_is_failed(db, settings):
    job = _claimed(f"{socket.gethostname()}:{_dead_pid()}", attempts=settings.JOB_MAX_ATTEMPTS)
    assert services.sweep()["failed"] == 1
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "stopped responding" in job.error
    assert RUNS == []


def test_a_finished_job_is_never_run_again_by_a_late_message(db):
    job = Job.objects.create(kind="test", key="done", title="x", status=JobStatus.SUCCEEDED, task_name=record_run.name)
    record_run.apply((job.pk,))
    assert RUNS == []
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_progress_reports_keep_the_heartbeat_fresh(db):
    job = _running(attempts=1, seen_ago=timedelta(hours=1))
    services.JobReporter(job.pk).progress(0.5, "half-way")
    job.refresh_from_db()
    assert timezone.now() - job.heartbeat_at < timedelta(seconds=5)
