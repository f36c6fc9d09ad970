"""A real Celery beat (database scheduler) and worker against Redis: a schedule firing every two seconds
enqueues exactly one job for its period, the worker runs it, and the outcome is recorded."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.services

REDIS_URL = os.environ.get("TEST_BEAT_REDIS_URL", "redis://127.0.0.1:6379/11")

SCHEDULE = """
import json
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from routing.models import RoutingEvent
every, _ = IntervalSchedule.objects.get_or_create(every=2, period=IntervalSchedule.SECONDS)
# slot_seconds=10**10: every firing of the test belongs to the same period (floored to 10^10 s since
# the epoch: one slot until the year 2286), so all but one are duplicates. An hour-long slot made the
# test fail when it ran across the hour (two periods, two jobs).
PeriodicTask.objects.create(name="itest-load", task="experiments.fire_schedule", interval=every,
                            kwargs=json.dumps({"name": "load_check", "slot_seconds": 10**10}))
RoutingEvent.objects.bulk_create([RoutingEvent(request_id=f"r{i}", mode="auto", expert="dmv" if i < 50 else "ssa") for i in range(60)])
"""


def _redis_or_skip():
    import redis

    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis unreachable at {REDIS_URL}: {exc}")
    client.flushdb()  # no messages left over from an earlier run


@pytest.fixture
def celery_beat(tmp_path):
    started: list[subprocess.Popen] = []

    def start(env: dict[str, str]) -> tuple[subprocess.Popen, object]:
        log = tmp_path / "beat.log"
        argv = [sys.executable, "-m", "celery", "-A", "switchboard", "beat", "--loglevel=INFO",
                "-S", "django_celery_beat.schedulers:DatabaseScheduler", "--schedule", str(tmp_path / "celerybeat-schedule")]
        with open(log, "w") as out:
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        started.append(proc)
        return proc, log

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _rows(db, sql):
    with sqlite3.connect(db, timeout=10) as conn:
        return conn.execute(sql).fetchall()


def test_beat_firing_every_two_seconds_runs_one_job_per_period(tmp_path, project_env, manage, migrate, celery_worker, celery_beat):
    _redis_or_skip()
    env = {**project_env, "CELERY_BROKER_URL": REDIS_URL}
    migrate(env)
    manage(env, "shell", "-c", SCHEDULE)
    worker, worker_log = celery_worker(env)
    beat, beat_log = celery_beat(env)
    db = tmp_path / "var" / "db.sqlite3"

    deadline, jobs = time.monotonic() + 120, []
    while time.monotonic() < deadline:
        jobs = _rows(db, "SELECT id, status, result FROM jobs_job WHERE kind = 'scheduled_load_check'")
        if jobs and jobs[0][1] in ("succeeded", "failed"):
            break
        assert worker.poll() is None, worker_log.read_text()[-4000:]
        assert beat.poll() is None, beat_log.read_text()[-4000:]
        time.sleep(0.5)
    logs = f"{jobs}\nworker:\n{worker_log.read_text()[-3000:]}\nbeat:\n{beat_log.read_text()[-3000:]}"
    assert jobs, logs
    assert jobs[0][1] == "succeeded", logs

    time.sleep(8)  # beat keeps firing every 2 s: every later firing must find the period claimed
    fired = worker_log.read_text().count("Task experiments.fire_schedule")
    assert fired >= 3, f"beat fired only {fired} times:\n{beat_log.read_text()[-3000:]}"
    jobs = _rows(db, "SELECT id, status, result FROM jobs_job WHERE kind = 'scheduled_load_check'")
    assert len(jobs) == 1
    assert json.loads(jobs[0][2]) == {"alarms": ["dmv"]}
    assert _rows(db, "SELECT count(*) FROM experiments_scheduledrun WHERE task = 'load_check'") == [(1,)]
    assert _rows(db, "SELECT kind, subject FROM experiments_alarm") == [("load", "dmv")]
