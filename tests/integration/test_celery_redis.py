"""A real Celery worker consumes a real job, through Redis and through the default filesystem broker, and
queues again, as it starts, a job that its dead predecessor left running."""

from __future__ import annotations

import json
import os
import re
import sqlite3

import pytest

pytestmark = pytest.mark.services

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
QUESTIONS = ["How do I renew my driver license?", "When can I start my retirement benefits?", "How do I apply for a student loan?"]
ENQUEUE = """
from jobs.services import enqueue_once
from labeling import tasks
job = enqueue_once("import_queries", "import:itest", "Import test questions", tasks.import_queries,
                   {{"path": {path!r}, "name": "questions.jsonl", "source": "itest"}})
print("JOB", job.pk)
"""


def redis_reachable() -> str | None:
    """None when Redis answers a PING at REDIS_URL, else the reason it does not."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2).ping()
    except redis.RedisError as exc:
        return f"Redis unreachable at {REDIS_URL}: {exc}"
    return None


def run_import_job(tmp_path, env, manage, migrate, celery_worker, wait_for_job):
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"text": q}) + "\n" for q in QUESTIONS))
    migrate(env)
    worker, log = celery_worker(env)

    output = manage(env, "shell", "-c", ENQUEUE.format(path=str(questions)))
    job_id = int(re.search(r"^JOB (\d+)$", output, re.M).group(1))

    db = tmp_path / "var" / "db.sqlite3"
    assert wait_for_job(db, job_id, worker, log) == "succeeded"
    with sqlite3.connect(db) as conn:
        texts = sorted(row[0] for row in conn.execute("SELECT text FROM labeling_query WHERE source = 'itest'"))
        result = json.loads(conn.execute("SELECT result FROM jobs_job WHERE id = ?", (job_id,)).fetchone()[0])
    assert texts == sorted(QUESTIONS)
    assert result["imported"] == 3
    assert "Task labeling.tasks.import_queries" in log.read_text()


def test_a_worker_consumes_a_job_from_redis(tmp_path, project_env, manage, migrate, celery_worker, wait_for_job):
    if (reason := redis_reachable()) is not None:
        pytest.skip(reason)
    env = {**project_env, "CELERY_BROKER_URL": REDIS_URL}

    run_import_job(tmp_path, env, manage, migrate, celery_worker, wait_for_job)


def test_a_worker_consumes_a_job_from_the_default_filesystem_broker(tmp_path, project_env, manage, migrate, celery_worker, wait_for_job):
    assert "CELERY_BROKER_URL" not in project_env

    run_import_job(tmp_path, project_env, manage, migrate, celery_worker, wait_for_job)

    assert (tmp_path / "var" / "broker" / "out").is_dir()


CLAIM_AND_DIE = """
import json, os
from jobs import services
from jobs.models import Job
from labeling import tasks
job = Job.objects.create(kind="import_queries", key="import:restart", title="Import", task_name=tasks.import_queries.name,
                         params={{"path": {path!r}, "name": "questions.jsonl", "source": "restart"}})
services.claim(job.pk)  # this process runs the job, and dies half-way: no outcome, no heartbeat thread
print("JOB", job.pk, flush=True)
os._exit(0)
"""



def _row(db, job_id: int) -> dict:
    with sqlite3.connect(db, timeout=10) as conn:
        conn.row_factory = sqlite3.Row
        return dict(conn.execute("SELECT status, attempts, log FROM jobs_job WHERE id = ?", (job_id,)).fetchone())


def test_a_worker_that_starts_again_runs_at_once_the_job_its_dead_process_left_running(project_env, manage, migrate, celery_worker, wait_for_job, tmp_path):
    """No lease to wait out (JOB_LEASE_S stays 300 s) and no beat to wait for: the worker sweeps as it starts."""
    migrate(project_env)
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"text": q}) + "\n" for q in ["How do I renew my license?", "When is my tax refund due?"]))
    output = manage(project_env, "shell", "-c", CLAIM_AND_DIE.format(path=str(questions)))
    job_id = int(output.split("JOB", 1)[1].split()[0])
    db = tmp_path / "var" / "db.sqlite3"
    assert _row(db, job_id)["status"] == "running"  # left behind by a process that is gone

    worker, log = celery_worker(project_env)
    assert wait_for_job(db, job_id, worker, log) == "succeeded"
    row = _row(db, job_id)
    assert row["attempts"] == 2
    assert "is gone" in row["log"]
