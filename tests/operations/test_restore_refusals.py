"""A restore refuses, before writing anything, what it cannot restore safely, and says why in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from operations.backup import BackupRefused, backup
from operations.restore import restore
from routing.models import RoutingEvent
from tests.operations.conftest import use_data_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def made(tmp_path, settings, transactional_db):
    """A backup of a database holding one routing event; the settings then point at an empty data folder."""
    use_data_folder(settings, tmp_path / "var")
    RoutingEvent.objects.create(request_id="r1", expert="dmv")
    backup(tmp_path / "backup")
    use_data_folder(settings, tmp_path / "new")
    return tmp_path / "backup"


def _edit_manifest(folder: Path, **changes) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(changes)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_it_refuses_a_database_that_already_has_tables(made):
    with pytest.raises(BackupRefused, match=r"restore needs an empty database and data folder: the database has \d+ tables"):
        restore(made)


def test_it_refuses_a_data_folder_that_already_has_collections_or_routers(made, settings, empty_database):
    empty_database()
    (settings.ROUTER_DIR / "v1").mkdir(parents=True)
    (settings.ROUTER_DIR / "v1" / "config.json").write_text("{}")
    with pytest.raises(BackupRefused, match=r"routers is not empty"):
        restore(made)
    assert not connection_tables()  # nothing was written


def test_it_refuses_a_schema_newer_than_the_code(made, empty_database):
    manifest = json.loads((made / "manifest.json").read_text())
    _edit_manifest(made, migrations={**manifest["migrations"], "routing": "9999_from_the_future"})
    empty_database()
    with pytest.raises(BackupRefused, match=r"the backup's schema is newer than this code \(routing.9999_from_the_future unknown here\)"):
        restore(made)


def test_it_refuses_a_file_whose_checksum_does_not_match(made, empty_database):
    database = made / "database" / "switchboard.sqlite3"
    data = bytearray(database.read_bytes())
    data[-1] ^= 0xFF  # same size, one byte changed
    database.write_bytes(bytes(data))
    empty_database()
    with pytest.raises(BackupRefused, match=r"the backup is damaged: database/switchboard.sqlite3's checksum does not match the manifest"):
        restore(made)


def test_it_refuses_a_half_written_backup(made):
    (made / ".partial").mkdir()
    with pytest.raises(BackupRefused, match=r"half-written backup"):
        restore(made)
    (made / ".partial").rmdir()
    (made / "manifest.json").unlink()
    with pytest.raises(BackupRefused, match=r"half-written backup \(no manifest.json\)"):
        restore(made)


def test_a_backup_refuses_a_folder_that_is_not_empty(made):
    with pytest.raises(BackupRefused, match=r"is not empty: back up into a new or empty folder"):
        backup(made)


def connection_tables() -> list[str]:
    from django.db import connection

    return connection.introspection.table_names()


def test_the_command_exits_non_zero_with_one_line_saying_why(tmp_path):
    (tmp_path / "half" / ".partial").mkdir(parents=True)
    env = {**os.environ, "VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "switchboard.settings"}
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "manage.py", "restore", "--from", str(tmp_path / "half")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"CommandError: {tmp_path / 'half'} is a half-written backup (no manifest.json and a .partial folder): the backup that made it did not finish"]
