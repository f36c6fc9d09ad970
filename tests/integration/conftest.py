"""Helpers for tests against real services: the project run as subprocesses with their own settings.

Each test gets its own ``VAR_DIR`` and database, set through the environment exactly as a deployment
would, so nothing here shares state with the pytest process's Django.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Settings that would leak the caller's deployment into the test's own.
SCRUBBED = ("DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "QDRANT_URL", "QDRANT_PATH", "ROUTER_DIR", "DEMO_DIR", "VAR_DIR")
POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432")


@pytest.fixture
def project_env(tmp_path):
    """Environment for a subprocess of the project: its own VAR_DIR and SQLite database, real Celery (not eager)."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    var = tmp_path / "var"
    var.mkdir()
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "platform"), str(ROOT)]),
        DJANGO_SETTINGS_MODULE="switchboard.settings",
        VAR_DIR=str(var),
        DATABASE_URL=f"sqlite:///{var / 'db.sqlite3'}",
        CELERY_TASK_ALWAYS_EAGER="0",
        TORCH_THREADS="1",
        PYTHONUNBUFFERED="1",
        LOG_LEVEL="INFO",
    )
    return env


def _manage(env: dict[str, str], *args: str, timeout: float = 180) -> str:
    """Run ``manage.py ARGS`` in a subprocess; return its output, failing the test with it on a non-zero exit."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"manage.py {' '.join(args)} exited {proc.returncode}:\n{output[-4000:]}"
    return output


@pytest.fixture
def celery_worker(tmp_path):
    """Start a real Celery worker subprocess with a given environment; always stopped at teardown."""
    started: list[tuple[subprocess.Popen, Path]] = []

    def start(env: dict[str, str], queues: str = "cpu") -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"worker-{len(started)}.log"
        argv = [
            sys.executable, "-m", "celery", "-A", "switchboard", "worker", "--pool=solo", "-c", "1", "-Q", queues,
            "-n", f"itest-{uuid.uuid4().hex[:8]}@%h", "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]
        with open(log, "w") as out:
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        started.append((proc, log))
        return proc, log

    yield start

    for proc, _ in started:
        if proc.poll() is None:
            proc.terminate()  # warm shutdown
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _wait_for_job(db_path: Path, job_id: int, worker: subprocess.Popen, log: Path, timeout: float = 90) -> str:
    """Poll the Job row in the SQLite file until it ends; return its status (the test fails on timeout)."""
    deadline, status = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        with sqlite3.connect(db_path, timeout=10) as conn:
            row = conn.execute("SELECT status, error FROM jobs_job WHERE id = ?", (job_id,)).fetchone()
        status = row[0] if row else None
        if status in ("succeeded", "failed", "cancelled"):
            assert status == "succeeded", f"job {job_id} ended {status}: {row[1]}"
            return status
        if worker.poll() is not None:
            pytest.fail(f"the worker exited with {worker.returncode} while job {job_id} was {status}:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)
    pytest.fail(f"job {job_id} still {status} after {timeout:.0f} s; worker log:\n{log.read_text()[-4000:]}")


@pytest.fixture
def postgres_database():
    """``postgres_database()``: the URL of a fresh, empty database on the server at POSTGRES_URL.

    Every database made is dropped at teardown; the test is skipped when the server is unreachable.
    """
    import psycopg

    try:
        admin = psycopg.connect(f"{POSTGRES_URL}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL unreachable at {POSTGRES_URL}: {str(exc).strip()}")
    names: list[str] = []

    def create() -> str:
        names.append(f"switchboard_test_{uuid.uuid4().hex[:12]}")
        admin.execute(f'CREATE DATABASE "{names[-1]}"')
        return f"{POSTGRES_URL}/{names[-1]}"

    try:
        yield create
    finally:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def manage():
    """``manage(env, *args)``: run manage.py in a subprocess and return its output."""
    return _manage


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory) -> Path:
    """A SQLite database that ``manage.py migrate --no-input`` built, once a session, in a subprocess of its own.

    Migrating is a Django start-up and ~80 migrations (10-15 s on 2 cores); every test that needs a
    migrated database gets its own copy of this one (``migrate``) instead. The migrations depend on
    nothing but the database: a copy is the database that the test's own ``migrate`` would have made.
    """
    var = tmp_path_factory.mktemp("migrated") / "var"
    var.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT / "platform"), str(ROOT)]), DJANGO_SETTINGS_MODULE="switchboard.settings",
               VAR_DIR=str(var), DATABASE_URL=f"sqlite:///{var / 'db.sqlite3'}", CELERY_TASK_ALWAYS_EAGER="0", TORCH_THREADS="1")
    output = _manage(env, "migrate", "--no-input")
    assert "Applying jobs.0001_initial... OK" in output
    return var / "db.sqlite3"


@pytest.fixture
def migrate(migrated_sqlite):
    """``migrate(env)``: the SQLite database at ``env``'s DATABASE_URL, migrated (a copy of ``migrated_sqlite``)."""

    def copy(env: dict[str, str]) -> Path:
        target = Path(env["DATABASE_URL"].removeprefix("sqlite:///"))
        assert env["DATABASE_URL"].startswith("sqlite:///"), env["DATABASE_URL"]
        assert not target.exists(), target
        source, copied = sqlite3.connect(migrated_sqlite), sqlite3.connect(target)
        try:
            source.backup(copied)  # a consistent copy, whatever the source's journal (WAL) holds
        finally:
            source.close()
            copied.close()
        return target

    return copy


@pytest.fixture
def wait_for_job():
    """``wait_for_job(db_path, job_id, worker, log)``: block until the job succeeds (or fail the test)."""
    return _wait_for_job
