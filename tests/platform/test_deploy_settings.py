"""Production settings: `check --deploy` is clean, secrets come only from the environment, DEBUG is refused."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _manage(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE", "SWITCHBOARD_ENV")}
    base.update(PYTHONPATH=os.pathsep.join([str(ROOT / "platform"), str(ROOT)]), VAR_DIR=str(tmp_path / "var"), **env)
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=base, capture_output=True, text=True, timeout=300)


def test_check_deploy_reports_no_security_issue_in_production(tmp_path):
    proc = _manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", "--tag", "security",
                   SWITCHBOARD_ENV="production", SECRET_KEY=secrets.token_urlsafe(60), ALLOWED_HOSTS="switchboard.example.com")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "System check identified no issues" in proc.stdout


def test_production_refuses_to_start_without_a_secret_key_from_the_environment(tmp_path):
    proc = _manage(tmp_path, "check", SWITCHBOARD_ENV="production", ALLOWED_HOSTS="switchboard.example.com")
    assert proc.returncode != 0
    assert "needs SECRET_KEY" in proc.stderr


def test_production_refuses_debug(tmp_path):
    proc = _manage(tmp_path, "check", SWITCHBOARD_ENV="production", SECRET_KEY=secrets.token_urlsafe(60), DEBUG="true")
    assert proc.returncode != 0
    assert "refuses DEBUG" in proc.stderr


def _setting(tmp_path, name: str, **env: str) -> str:
    """A setting as a new process with ``env`` reads it (manage.py's settings module; no app is loaded for it)."""
    base = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE", "SWITCHBOARD_ENV")}
    base.update(PYTHONPATH=os.pathsep.join([str(ROOT / "platform"), str(ROOT)]), VAR_DIR=str(tmp_path / "var"),
                DJANGO_SETTINGS_MODULE="switchboard.settings", **env)
    code = f"from django.conf import settings; print(settings.{name})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=base, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_the_chat_api_is_closed_by_default_in_production_and_opened_only_explicitly(tmp_path):
    production = {"SWITCHBOARD_ENV": "production", "SECRET_KEY": secrets.token_urlsafe(60), "ALLOWED_HOSTS": "switchboard.example.com"}
    assert _setting(tmp_path, "CHAT_API_REQUIRE_AUTH", **production) == "True"
    assert _setting(tmp_path, "CHAT_API_REQUIRE_AUTH", CHAT_API_REQUIRE_AUTH="false", **production) == "False"
    assert _setting(tmp_path, "CHAT_API_REQUIRE_AUTH") == "False"  # a laptop's demo stays open


def test_the_test_settings_never_use_the_data_folder_the_shell_exports(tmp_path):
    """`make test` in a shell that exported an operator's VAR_DIR (and ADAPTER_DIR) works in a folder of its own."""
    operator = tmp_path / "srv"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT)]), "VAR_DIR": str(operator),
           "ADAPTER_DIR": str(operator / "adapters"), "DJANGO_SETTINGS_MODULE": "switchboard.settings_test"}
    code = "from django.conf import settings; print(settings.VAR_DIR); print(settings.ADAPTER_DIR)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    var_dir, adapter_dir = proc.stdout.strip().splitlines()[-2:]
    assert Path(var_dir).name.startswith("switchboard-test-")
    assert not adapter_dir.startswith(str(operator))
    assert not operator.exists() or not any(operator.iterdir())
