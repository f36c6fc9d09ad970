"""Migrations and an ORM round trip on a real PostgreSQL, in a throwaway database."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.services

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


def test_it_migrates_and_round_trips_models_on_postgresql(postgres_database, project_env, manage):
    env = {**project_env, "DATABASE_URL": postgres_database()}

    migrated = manage(env, "migrate", "--no-input")
    output = manage(env, "shell", "-c", ROUND_TRIP)

    assert "Applying jobs.0001_initial... OK" in migrated
    assert "VENDOR postgresql" in output
    assert "EXPERT ssa Social Security Administration retirement,benefits active" in output
    assert "JOB import_queries queued /tmp/q.jsonl True" in output
