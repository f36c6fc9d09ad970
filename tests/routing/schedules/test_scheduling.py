"""Scheduled jobs: default schedules created once, a firing claimed once, crontabs validated, outcomes recorded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django_celery_beat.models import PeriodicTask

from jobs.models import Job
from routing.alarms import services as alarm_services
from routing.alarms.models import Alarm, EvaluationSnapshot
from routing.models import RoutingEvent
from routing.schedules import scheduling
from routing.schedules.models import ScheduledRun
from tests.factories import make_expert

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 3, 0, 12, tzinfo=UTC)


def test_ensure_schedules_creates_the_defaults_once():
    call_command("ensure_schedules", verbosity=0)
    call_command("ensure_schedules", verbosity=0)
    names = set(PeriodicTask.objects.filter(task=scheduling.TASK_NAME).values_list("name", flat=True))
    assert names == {f"switchboard:{s.name}" for s in scheduling.DEFAULTS}
    weekly = PeriodicTask.objects.get(name="switchboard:retrain_router").crontab
    assert (weekly.minute, weekly.hour, weekly.day_of_week) == ("0", "3", "1")


def test_ensure_schedules_leaves_an_edited_schedule_alone():
    call_command("ensure_schedules", verbosity=0)
    PeriodicTask.objects.filter(name="switchboard:load_check").update(enabled=False)
    call_command("ensure_schedules", verbosity=0)
    assert not PeriodicTask.objects.get(name="switchboard:load_check").enabled


def test_beat_firing_twice_in_the_same_period_enqueues_one_job(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False  # keep the job queued: only the enqueueing is under test
    first = scheduling.fire("load_check", now=NOW)
    second = scheduling.fire("load_check", now=NOW + timedelta(seconds=30))
    assert first is not None
    assert second is None
    assert Job.objects.filter(kind="scheduled_load_check").count() == 1
    assert ScheduledRun.objects.filter(task="load_check").count() == 1


def test_a_new_period_while_the_job_is_still_active_reuses_it(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    first = scheduling.fire("load_check", now=NOW)
    later = scheduling.fire("load_check", now=NOW + timedelta(minutes=5))
    assert later.pk == first.pk  # enqueue_once: one active job per schedule


def test_an_unknown_schedule_claims_nothing():
    with pytest.raises(KeyError):
        scheduling.fire("no_such_job", now=NOW)
    assert not ScheduledRun.objects.exists()


def test_the_job_runs_and_records_its_outcome(django_capture_on_commit_callbacks):
    for i in range(60):
        RoutingEvent.objects.create(request_id=f"r{i}", mode="auto", expert="dmv" if i < 50 else "ssa")
    with django_capture_on_commit_callbacks(execute=True):
        job = scheduling.fire("load_check", now=NOW)  # eager in tests: runs in-process after commit
    job.refresh_from_db()
    assert job.status == "succeeded"
    assert job.result == {"alarms": ["dmv"]}
    alarm = Alarm.objects.get(kind="load")
    assert "83%" in alarm.message
    assert "Split dmv" in alarm.proposal
    assert scheduling.last_outcome("load_check").pk == job.pk


def test_nightly_evaluation_stores_a_snapshot(django_capture_on_commit_callbacks):
    RoutingEvent.objects.create(request_id="r1", mode="auto", expert="dmv", fallback_used=True)
    RoutingEvent.objects.create(request_id="r2", mode="auto", expert="dmv")
    with django_capture_on_commit_callbacks(execute=True):
        job = scheduling.fire("nightly_evaluation", now=NOW)
    job.refresh_from_db()
    assert job.status == "succeeded", job.error
    snapshot = EvaluationSnapshot.objects.get()
    assert snapshot.metrics["requests"] == 2
    assert snapshot.metrics["fallback_rate"] == 0.5
    assert snapshot.metrics["shares"] == {"dmv": 1.0}


def test_load_below_the_threshold_raises_nothing():
    for i in range(60):
        RoutingEvent.objects.create(request_id=f"r{i}", mode="auto", expert=["dmv", "ssa", "va"][i % 3])
    assert alarm_services.check_load() == []


@pytest.mark.parametrize(
    ("fields", "bad"),
    [({"minute": "61"}, "minute"), ({"hour": "*/0"}, "hour"), ({"day_of_week": "8"}, "day_of_week"), ({"month_of_year": "13"}, "month_of_year"),
     ({"minute": "1 2"}, "minute")],
)
def test_an_invalid_crontab_names_the_field(fields, bad):
    with pytest.raises(scheduling.InvalidCrontab) as exc:
        scheduling.validate_crontab(**fields)
    assert exc.value.field == bad


def test_a_valid_crontab_passes():
    assert scheduling.validate_crontab(minute="*/15", hour="1-5", day_of_week="mon-fri")["minute"] == "*/15"
    with pytest.raises(scheduling.InvalidCrontab, match="5 fields"):
        scheduling.parse_cron("0 3 *")


def test_knowledge_refresh_indexes_only_experts_with_pending_documents(settings, monkeypatch):
    from django.utils import timezone

    from knowledge.models import Document
    from routing.schedules import routines as jobs

    settings.CELERY_TASK_ALWAYS_EAGER = False
    dmv, ssa = make_expert("dmv", "dmv", public=False), make_expert("ssa", "ssa", public=False)
    Document.objects.create(expert=dmv, external_id="a", title="a", content_hash="h", text="changed text")  # indexed_at empty: changed
    Document.objects.create(expert=ssa, external_id="b", title="b", content_hash="h", text="same", indexed_at=timezone.now())
    job = Job.objects.create(kind="t", key="t", title="t")
    result = jobs.refresh_knowledge(job, jobs.JobReporter())
    assert list(result["index_jobs"]) == ["dmv"]
    assert Job.objects.get(pk=result["index_jobs"]["dmv"]).key == "index:dmv"
