"""``manage.py ensure_admin`` creates the console account once and keeps a generated password private."""

from __future__ import annotations

import io
import re
import stat

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def ensure_admin() -> str:
    out = io.StringIO()
    call_command("ensure_admin", stdout=out)
    return out.getvalue()


@pytest.fixture
def var_dir(tmp_path, settings, monkeypatch):
    for name in ("ADMIN_USERNAME", "ADMIN_EMAIL", "ADMIN_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    settings.VAR_DIR = tmp_path
    return tmp_path


def test_it_generates_a_password_prints_it_once_and_keeps_it_readable_by_the_owner_only(var_dir):
    first = ensure_admin()
    second = ensure_admin()

    password = re.search(r"with password: (\S+)", first).group(1)
    credentials = var_dir / "admin-credentials.txt"
    user = get_user_model().objects.get(username="admin")
    assert user.check_password(password)
    assert user.is_superuser
    assert user.is_staff
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    assert credentials.read_text() == f"username: admin\npassword: {password}\n"
    assert password not in second
    assert f"its generated password is in {credentials}" in second
    assert get_user_model().objects.count() == 1


def test_it_takes_the_account_from_the_environment_and_writes_no_file(var_dir, monkeypatch):
    monkeypatch.setenv("ADMIN_USERNAME", "ops")
    monkeypatch.setenv("ADMIN_EMAIL", "ops@example.org")
    monkeypatch.setenv("ADMIN_PASSWORD", "first-secret-123")
    ensure_admin()
    monkeypatch.setenv("ADMIN_PASSWORD", "second-secret-456")

    output = ensure_admin()

    user = get_user_model().objects.get(username="ops")
    assert user.check_password("second-secret-456")
    assert user.email == "ops@example.org"
    assert "updated: password (from ADMIN_PASSWORD)" in output
    assert not (var_dir / "admin-credentials.txt").exists()


def test_setting_a_password_removes_the_stale_generated_one(var_dir, monkeypatch):
    ensure_admin()
    monkeypatch.setenv("ADMIN_PASSWORD", "chosen-secret-789")

    ensure_admin()

    assert get_user_model().objects.get(username="admin").check_password("chosen-secret-789")
    assert not (var_dir / "admin-credentials.txt").exists()
