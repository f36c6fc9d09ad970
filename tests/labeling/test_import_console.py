"""The console's import page: upload with a progress bar (XHR answered in JSON) or a plain form post."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from jobs.models import Job
from labeling.models import Query

from .conftest import CSV, XHR

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("var_dir")]


def test_the_import_page_has_the_upload_form_and_its_script(console):
    html = console.get(reverse("labeling-import")).content.decode()

    assert 'id="import-form"' in html
    assert 'enctype="multipart/form-data"' in html
    assert 'data-max-bytes="2147483648"' in html
    assert 'name="redact"' in html
    assert 'name="source"' in html
    assert "/static/js/upload.js" in html
    assert 'aria-current="page">Discovery</a>' in html


def test_an_upload_from_the_script_answers_with_the_job_page(console, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = console.post(reverse("labeling-import"), {"file": SimpleUploadedFile("faq.csv", CSV), "source": "", "redact": ""}, headers=XHR)

    assert response.status_code == 202
    job = Job.objects.get()
    assert response.json() == {"job": job.pk, "job_url": f"/jobs/{job.pk}/"}
    job.refresh_from_db()
    assert (job.status, job.result["imported"]) == ("succeeded", 2)
    assert set(Query.objects.values_list("source", flat=True)) == {"faq"}


def test_a_plain_form_post_redirects_to_the_job_page(console):
    response = console.post(reverse("labeling-import"), {"file": SimpleUploadedFile("faq.csv", CSV), "source": "support"})

    job = Job.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.params["source"] == "support"


def test_a_bad_file_is_refused_with_the_reason(console):
    response = console.post(reverse("labeling-import"), {"file": SimpleUploadedFile("faq.csv", b"id,body\n1,hi\n")}, headers=XHR)

    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("The CSV has no 'text' column (columns found: 'id', 'body')")
    assert not Job.objects.exists()


def test_without_the_script_a_bad_file_shows_the_form_again_with_the_reason(console):
    response = console.post(reverse("labeling-import"), {"file": SimpleUploadedFile("faq.csv", b"")})

    assert response.status_code == 400
    assert "The file is empty." in response.content.decode()


def test_an_upload_over_the_limit_is_refused_before_it_is_read(console, settings):
    settings.QUERY_IMPORT_MAX_BYTES = 10

    response = console.generic("POST", reverse("labeling-import"), b"x" * 70_000, content_type="multipart/form-data; boundary=zzz", headers=XHR)

    assert response.status_code == 413
    assert response.json() == {"error": {"message": "The upload is 70,000 bytes; the limit is 10 bytes."}}


def test_a_file_over_the_limit_is_refused_with_413(console, settings):
    settings.QUERY_IMPORT_MAX_BYTES = 10

    response = console.post(reverse("labeling-import"), {"file": SimpleUploadedFile("faq.csv", CSV)}, headers=XHR)

    assert response.status_code == 413
    assert response.json()["error"]["message"] == f"The file is {len(CSV)} bytes; the limit is 10 bytes."


def test_the_upload_needs_a_csrf_token(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)

    response = client.post(reverse("labeling-import"), {"file": SimpleUploadedFile("faq.csv", CSV)}, headers=XHR)

    assert response.status_code == 403
    assert not Job.objects.exists()
