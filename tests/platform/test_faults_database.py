"""The database locked or briefly gone: safe requests are retried, then everyone gets 503 with Retry-After."""

from __future__ import annotations

import pytest
from django.db import InterfaceError, OperationalError
from django.db.backends import utils as db_utils

from jobs.models import Job


class FlakyDatabase:
    """Inside the block, the next ``failures`` queries raise ``error`` (then the database answers again)."""

    def __init__(self, failures: int, error: Exception):
        self.failures, self.error, self.raised = failures, error, 0
        self.original = db_utils.CursorWrapper._execute

    def __enter__(self) -> FlakyDatabase:
        original = self.original

        def execute(cursor, sql, params, *ignored):
            if self.failures > 0:
                self.failures -= 1
                self.raised += 1
                raise self.error
            return original(cursor, sql, params, *ignored)

        db_utils.CursorWrapper._execute = execute
        return self

    def __exit__(self, *exc) -> None:
        db_utils.CursorWrapper._execute = self.original


@pytest.fixture
def signed_in(client, owner, settings):
    settings.DB_UNAVAILABLE_BACKOFF_S = 0.01
    client.force_login(owner)
    return client


@pytest.fixture
def job(db) -> Job:
    return Job.objects.create(kind="test", key="k", title="A job")


def test_a_read_that_meets_a_locked_database_twice_is_retried_and_answers(signed_in, job):
    with FlakyDatabase(failures=2, error=OperationalError("database is locked")) as flaky:
        response = signed_in.get(f"/api/v1/jobs/{job.pk}")
    assert response.status_code == 200, response.content
    assert response.json()["id"] == job.pk
    assert flaky.raised == 2


def test_a_read_against_a_database_that_stays_locked_gets_503_with_retry_after_and_the_error_body(signed_in, job):
    with FlakyDatabase(failures=10_000, error=OperationalError("database is locked")):
        response = signed_in.get(f"/api/v1/jobs/{job.pk}")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    error = response.json()["error"]
    assert error["type"] == "service_unavailable"
    assert "try again" in error["message"]


def test_a_console_page_against_a_gone_database_gets_a_503_page(signed_in, job):
    with FlakyDatabase(failures=10_000, error=OperationalError("server closed the connection unexpectedly")):
        response = signed_in.get(f"/jobs/{job.pk}/")
    assert response.status_code == 503
    assert response["Retry-After"]
    assert b"Temporarily unavailable" in response.content


def test_a_write_is_never_replayed_but_answered_503_at_once(signed_in, job, settings):
    settings.CHAT_API_REQUIRE_AUTH = False
    with FlakyDatabase(failures=10_000, error=OperationalError("database is locked")) as flaky:
        response = signed_in.post(f"/api/v1/jobs/{job.pk}", data={}, content_type="application/json")
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "service_unavailable"
    assert flaky.raised == 1  # one attempt only: the request might have written part of its work


def test_a_query_that_is_simply_wrong_is_not_hidden_as_unavailable(signed_in, job):
    with FlakyDatabase(failures=1, error=OperationalError("no such column: foo")):
        with pytest.raises(OperationalError, match="no such column"):
            signed_in.get(f"/api/v1/jobs/{job.pk}")  # the test client re-raises what would be a 500 and a logged traceback


@pytest.mark.parametrize("error", [
    OperationalError('connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused'),
    OperationalError("terminating connection due to administrator command"),  # pg_ctl stop -m fast
    OperationalError("FATAL:  the database system is shutting down"),
    InterfaceError("connection already closed"),
])
def test_a_chat_request_while_postgresql_restarts_gets_the_apis_json_503_with_retry_after(client, db, monkeypatch, error):
    def start(self, stream=False):
        raise error

    monkeypatch.setattr("serving.chat.ChatTurn.start", start)
    response = client.post("/v1/chat/completions", data={"model": "auto", "messages": [{"role": "user", "content": "hello"}]},
                           content_type="application/json")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"] == "5"
    assert response.json() == {"error": {"type": "service_unavailable", "code": "database_unavailable",
                                         "message": "The database is busy or unavailable; try again in a few seconds.", "param": None, "details": None}}
