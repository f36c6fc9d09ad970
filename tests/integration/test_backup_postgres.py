"""Backup and restore on a real PostgreSQL: ``pg_dump`` of one database, ``pg_restore`` into another, empty one, with another data folder."""

from __future__ import annotations

import os
import uuid

import pytest

pytestmark = pytest.mark.services

SERVER_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432")
WRITE = """
from experts.models import Expert
from routing.models import RoutingEvent
Expert.objects.create(slug="ssa", name="Social Security Administration", keywords=["retirement"])
RoutingEvent.objects.create(request_id="r-pg", expert="ssa", question="When does my pension start?")
"""
READ = """
from experts.models import Expert
from routing.models import RoutingEvent
from django.db import connection
print("VENDOR", connection.vendor)
print("EXPERTS", ",".join(Expert.objects.values_list("slug", flat=True)))
print("EVENT", RoutingEvent.objects.get(request_id="r-pg").question)
"""


@pytest.fixture
def two_databases():
    """Two fresh, empty databases on the server at SERVER_URL, dropped afterwards; skips when the server is unreachable."""
    import psycopg

    try:
        admin = psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL unreachable at {SERVER_URL}: {str(exc).strip()}")
    names = [f"switchboard_test_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    for name in names:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield [f"{SERVER_URL}/{name}" for name in names]
    finally:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def test_a_postgresql_backup_restores_into_an_empty_database(two_databases, project_env, manage, tmp_path):
    source = {**project_env, "DATABASE_URL": two_databases[0]}
    target = {**project_env, "DATABASE_URL": two_databases[1], "VAR_DIR": str(tmp_path / "new")}
    manage(source, "migrate", "--no-input")
    manage(source, "shell", "-c", WRITE)

    made = manage(source, "backup", "--to", str(tmp_path / "backup"))
    restored = manage(target, "restore", "--from", str(tmp_path / "backup"))

    assert "database (postgresql)" in made
    assert (tmp_path / "backup" / "database" / "switchboard.pgdump").is_file()
    assert "database restored (postgresql" in restored
    output = manage(target, "shell", "-c", READ)
    assert "VENDOR postgresql" in output
    assert "EXPERTS ssa" in output
    assert "EVENT When does my pension start?" in output
