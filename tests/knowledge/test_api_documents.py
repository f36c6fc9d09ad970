"""``/api/v1/experts/{slug}/documents``: uploads checked before anything is stored, ingested and indexed by a job."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from rest_framework.test import APIClient

from jobs.models import Job
from knowledge.models import Document

from .conftest import make_pdf

pytestmark = pytest.mark.django_db
URL = "/api/v1/experts/dmv/documents"


@pytest.fixture
def api(owner):
    # The experts here have no team: only staff may change them (experts.access); teams are tested in tests/platform/test_team_matrix.py.
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    client = APIClient()
    client.force_authenticate(owner)
    return client


def upload(name: str, content: bytes, content_type: str = "application/octet-stream") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type=content_type)


def stored_uploads() -> list[str]:
    folder = Path(settings.VAR_DIR) / "uploads" / "knowledge"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_files_are_accepted_and_the_job_ingests_and_indexes_them(api, kb, dmv, owner, django_capture_on_commit_callbacks):
    files = [upload("renew.md", b"# Renewals\n\nRenew online."), upload("plates.pdf", make_pdf("Licence plates\nOrder plates online"))]
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(URL, {"files": files}, format="multipart")

    assert response.status_code == 202, response.content
    job = Job.objects.get()
    assert response.json() == {"job": job.pk, "status": "queued", "status_url": f"/api/v1/jobs/{job.pk}", "console_url": f"/jobs/{job.pk}/"}
    assert (job.kind, job.created_by, job.params["expert"]) == ("ingest_documents", owner, "dmv")
    status = api.get(f"/api/v1/jobs/{job.pk}").json()
    assert status["status"] == "succeeded"
    assert (status["result"]["created"], status["result"]["failed_files"]) == (2, 0)
    assert sorted(Document.objects.values_list("title", flat=True)) == ["Licence plates", "Renewals"]
    assert all(d.indexed_at for d in Document.objects.all())
    assert stored_uploads() == []  # ingested: the stored copies are removed

    listing = api.get(URL).json()
    assert sorted(d["title"] for d in listing) == ["Licence plates", "Renewals"]
    assert {"version", "chunk_count", "indexed_at"} <= set(listing[0])


def test_the_same_upload_twice_changes_nothing(api, kb, dmv, django_capture_on_commit_callbacks):
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            response = api.post(URL, {"files": [upload("renew.txt", b"Renew your licence online.")]}, format="multipart")
        assert response.status_code == 202

    second = Job.objects.order_by("-pk").first()
    assert second.result["unchanged"] == 1
    assert Document.objects.get().version == 1


def test_a_request_body_over_the_limit_is_refused_before_it_is_read(api, kb, dmv):
    # 500 MB announced; the view answers from the header alone, so the test need not send them.
    response = api.generic("POST", URL, b"--zzz--", content_type="multipart/form-data; boundary=zzz", CONTENT_LENGTH=str(500 * 1024**2))

    assert response.status_code == 413
    assert response.json()["error"] == {
        "type": "file_too_large", "message": "the upload is 524,288,000 bytes; the limit is 104,857,600 bytes", "param": "files",
    }
    assert not Job.objects.exists()


@override_settings(DOCUMENT_UPLOAD_MAX_BYTES=10)
def test_a_file_over_the_limit_is_refused_with_413(api, kb, dmv):
    response = api.post(URL, {"files": [upload("big.txt", b"x" * 50)]}, format="multipart")

    assert response.status_code == 413
    assert response.json()["error"]["message"] == "the files add up to 50 bytes; the limit is 10 bytes"
    assert stored_uploads() == []


@pytest.mark.parametrize(("name", "content", "message"), [
    ("empty.txt", b"", "empty.txt: the file is empty"),
    ("photo.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "photo.txt: this is a binary file, not text, HTML, PDF or a Word document"),
    ("old.doc", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100, "old.doc: old Office formats (.doc, .xls, .ppt) are not supported; save the file as .docx or PDF"),
])
def test_files_we_cannot_read_are_refused_and_nothing_is_stored(api, kb, dmv, name, content, message):
    response = api.post(URL, {"files": [upload("fine.txt", b"A fine file."), upload(name, content)]}, format="multipart")

    assert response.status_code == 400
    assert response.json()["error"]["message"] == message
    assert not Job.objects.exists()
    assert stored_uploads() == []


def test_a_corrupt_pdf_fails_the_job_with_a_reason_and_changes_nothing(api, kb, dmv, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(URL, {"files": [upload("broken.pdf", b"%PDF-1.4\n1 0 obj garbage")]}, format="multipart")

    assert response.status_code == 202
    job = Job.objects.get()
    assert job.status == "failed"
    assert job.error.startswith("no document could be read from the upload: broken.pdf: the PDF is damaged and cannot be read")
    assert not Document.objects.exists()


def test_a_path_traversal_file_name_is_sanitised(api, kb, dmv, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(URL, {"files": [upload("../../../etc/cron.d/evil.txt", b"Renew online.")]}, format="multipart")

    assert response.status_code == 202
    assert Document.objects.get().external_id == "evil.txt"
    assert not (Path(settings.VAR_DIR).parent / "etc").exists()


def test_a_missing_file_is_refused(api, kb, dmv):
    response = api.post(URL, {"note": "x"}, format="multipart")

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "send one or more files in the multipart field 'files'"


def test_an_unknown_expert_is_404(api, kb):
    response = api.post("/api/v1/experts/nobody/documents", {"files": [upload("a.txt", b"x")]}, format="multipart")

    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"


def test_strangers_are_turned_away(kb, dmv):
    response = APIClient().post(URL, {"files": [upload("a.txt", b"x")]}, format="multipart")

    assert response.status_code in (401, 403)
    assert not Job.objects.exists()


def test_delete_removes_the_document_and_its_chunks(api, kb, dmv, django_capture_on_commit_callbacks):
    from knowledge import ingest

    ingest.ingest_files(dmv, [("a.txt", b"Licence renewal"), ("b.txt", b"Registration")])
    document = Document.objects.get(external_id="a.txt")
    with django_capture_on_commit_callbacks(execute=True):
        response = api.delete(f"{URL}/{document.pk}")

    assert response.status_code == 202
    assert list(Document.objects.values_list("external_id", flat=True)) == ["b.txt"]
    assert kb.count("expert_dmv") == 1
    assert api.delete(f"{URL}/{document.pk}").status_code == 404
