"""``POST /api/v1/queries/import`` and ``GET /api/v1/jobs/<id>``: checked before anything is stored, imported by a job."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from rest_framework.test import APIClient

from jobs.models import Job
from labeling.models import Query

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("var_dir")]
URL = "/api/v1/queries/import"
CSV = b"text,label\nHow do I renew my licence?,dmv\n,dmv\nWhere is my refund?,irs\n"


@pytest.fixture
def api(owner, team):
    owner.groups.add(team)
    client = APIClient()
    client.force_authenticate(owner)
    return client


def upload(name: str, content: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="text/csv")


def uploads() -> list[str]:
    folder = Path(settings.VAR_DIR) / "uploads"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_an_upload_is_accepted_and_the_job_imports_it(api, owner, django_capture_on_commit_callbacks):
    # The task is sent on commit: here when the block ends, after the 202 (a worker would pick it up then).
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(URL, {"file": upload("helpdesk.csv", CSV), "source": "helpdesk", "redact": "true"}, format="multipart")

    assert response.status_code == 202
    job = Job.objects.get()
    assert response.json() == {"job": job.pk, "status": "queued", "status_url": f"/api/v1/jobs/{job.pk}", "console_url": f"/jobs/{job.pk}/"}
    assert response["Location"] == f"/api/v1/jobs/{job.pk}"
    assert (job.kind, job.created_by, job.params["source"], job.params["redact"]) == ("import_queries", owner, "helpdesk", True)
    assert sorted(Query.objects.values_list("text", flat=True)) == ["How do I renew my licence?", "Where is my refund?"]

    status = api.get(f"/api/v1/jobs/{job.pk}").json()

    assert (status["status"], status["progress"], status["percent"]) == ("succeeded", 1.0, 100)
    assert status["claimed_by"]  # the process that ran it (host:pid), for an operator
    assert status["queue"] == ""  # sent by the task's own routing
    assert status["result"]["imported"] == 2
    assert status["result"]["errors"] == [{"line": 3, "reason": "'text' is empty"}]
    assert uploads() == []  # imported in full: the stored copy is removed


def test_the_same_file_twice_gives_the_same_active_job(api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):  # no worker picks the job up
        first = api.post(URL, {"file": upload("log.csv", CSV)}, format="multipart").json()
        second = api.post(URL, {"file": upload("log.csv", CSV)}, format="multipart").json()
        other_source = api.post(URL, {"file": upload("log.csv", CSV), "source": "elsewhere"}, format="multipart").json()

    assert first["job"] == second["job"] != other_source["job"]  # the key is the file's SHA-256 with the source and redaction
    assert first["status"] == "queued"
    stored = uploads()
    assert len(stored) == 2
    assert all(name.endswith("-log.csv") for name in stored)
    assert sorted(Job.objects.values_list("params__source", flat=True)) == ["elsewhere", "log"]


def test_an_empty_file_is_refused(api):
    response = api.post(URL, {"file": upload("log.csv", b"")}, format="multipart")

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "file: the file is empty"
    assert not Job.objects.exists()
    assert uploads() == []


def test_a_file_that_is_not_utf8_is_refused(api):
    response = api.post(URL, {"file": upload("log.csv", "text\nÉté à Paris\n".encode("latin-1"))}, format="multipart")

    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("file: the file is not UTF-8 (byte 0xc9 on line 2 cannot be decoded)")
    assert not Job.objects.exists()


def test_a_csv_without_a_text_column_is_refused_naming_the_columns_found(api):
    response = api.post(URL, {"file": upload("log.csv", b"id,body\n1,hello\n")}, format="multipart")

    assert response.status_code == 400
    assert "columns found: 'id', 'body'" in response.json()["error"]["message"]
    assert not Job.objects.exists()


def test_a_jsonl_file_whose_first_line_is_not_an_object_is_refused(api):
    response = api.post(URL, {"file": upload("log.jsonl", b'"just a string"\n')}, format="multipart")

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "file: the first line is a JSON str, not an object; write one JSON object per line"


@override_settings(QUERY_IMPORT_MAX_BYTES=10)
def test_a_file_over_the_limit_is_refused_with_413(api):
    response = api.post(URL, {"file": upload("log.csv", CSV)}, format="multipart")

    assert response.status_code == 413
    assert response.json()["error"] == {"type": "file_too_large", "message": f"the file is {len(CSV)} bytes; the limit is 10 bytes", "param": "file"}
    assert not Job.objects.exists()
    assert uploads() == []


def test_a_request_body_over_the_limit_is_refused_before_it_is_read(api):
    with override_settings(QUERY_IMPORT_MAX_BYTES=10):
        response = api.generic("POST", URL, b"x" * 70_000, content_type="multipart/form-data; boundary=zzz")

    assert response.status_code == 413
    assert response.json()["error"]["message"] == "the upload is 70,000 bytes; the limit is 10 bytes"


def test_a_missing_file_is_refused(api):
    response = api.post(URL, {"source": "x"}, format="multipart")

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "file: No file was submitted."


def test_anonymous_uploads_are_refused(db):
    response = APIClient().post(URL, {"file": upload("log.csv", CSV)}, format="multipart")

    assert response.status_code == 403  # session authentication first: DRF answers 403, not 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert not Job.objects.exists()


def test_anonymous_users_cannot_read_jobs(db):
    job = Job.objects.create(kind="import_queries", key="k", title="Import")

    assert APIClient().get(f"/api/v1/jobs/{job.pk}").status_code == 403


def test_an_unknown_job_is_404(api):
    response = api.get("/api/v1/jobs/999")

    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
