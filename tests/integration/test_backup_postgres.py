"""Backup and restore on a real PostgreSQL: ``pg_dump`` of one database, ``pg_restore`` into another, empty one, with another data folder."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.services

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


def test_a_postgresql_backup_restores_into_an_empty_database(postgres_database, project_env, manage, tmp_path):
    source = {**project_env, "DATABASE_URL": postgres_database()}
    target = {**project_env, "DATABASE_URL": postgres_database(), "VAR_DIR": str(tmp_path / "new")}
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
