"""Migrations and an ORM round trip on a real PostgreSQL, in a throwaway database."""

from __future__ import annotations

import os
import uuid

import pytest

pytestmark = pytest.mark.services

SERVER_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432")
ROUND_TRIP = """
from experts.models import Expert
from jobs.models import Job
from django.db import connection
expert = Expert.objects.create(slug="ssa", name="Social Security Administration", keywords=["retirement", "benefits"])
job = Job.objects.create(kind="import_queries", key="import:pg", title="Import", params={"path": "/tmp/q.jsonl"})
e = Expert.objects.get(pk=expert.pk)
j = Job.objects.get(pk=job.pk)
print("VENDOR", connection.vendor)
print("EXPERT", e.slug, e.name, ",".join(e.keywords), e.status)
print("JOB", j.kind, j.status, j.params["path"], j.is_active)
"""


@pytest.fixture
def postgres_database():
    """A fresh, empty database on the server at SERVER_URL, dropped afterwards; skips when the server is unreachable."""
    import psycopg

    try:
        admin = psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL unreachable at {SERVER_URL}: {str(exc).strip()}")
    name = f"switchboard_test_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{SERVER_URL}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def test_it_migrates_and_round_trips_models_on_postgresql(postgres_database, project_env, manage):
    env = {**project_env, "DATABASE_URL": postgres_database}

    migrated = manage(env, "migrate", "--no-input")
    output = manage(env, "shell", "-c", ROUND_TRIP)

    assert "Applying jobs.0001_initial... OK" in migrated
    assert "VENDOR postgresql" in output
    assert "EXPERT ssa Social Security Administration retirement,benefits active" in output
    assert "JOB import_queries queued /tmp/q.jsonl True" in output
