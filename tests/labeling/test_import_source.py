"""The source name typed in the import form or sent to the API is the imported queries' source, and the job says so."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient

from jobs.models import Job
from labeling.models import Query

from .conftest import CSV, XHR

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("var_dir")]


def test_the_console_form_imports_under_the_source_typed(console, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        console.post(reverse("labeling-import"), {"file": SimpleUploadedFile("export-2024.csv", CSV), "source": " government "}, headers=XHR)

    job = Job.objects.get()
    assert set(Query.objects.values_list("source", flat=True)) == {"government"}
    assert job.title == "Import export-2024.csv as source 'government'"
    assert job.result["source"] == "government"
    assert "imported 2 as source 'government'" in job.log


def test_the_api_imports_under_the_source_sent_and_the_same_file_under_another_name_is_that_sources_too(
    owner, team, django_capture_on_commit_callbacks,
):
    owner.groups.add(team)
    api = APIClient()
    api.force_authenticate(owner)

    for source in ("gov", "cloud"):
        with django_capture_on_commit_callbacks(execute=True):
            response = api.post("/api/v1/queries/import", {"file": SimpleUploadedFile("log.csv", CSV), "source": source}, format="multipart")
        assert api.get(response.json()["status_url"]).json()["result"]["source"] == source

    assert sorted(Query.objects.values_list("source", "text")) == [
        ("cloud", "How do I renew my licence?"), ("cloud", "Where is my refund?"), ("gov", "How do I renew my licence?"), ("gov", "Where is my refund?"),
    ]


def test_without_a_source_the_file_name_is_the_source(console, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        console.post(reverse("labeling-import"), {"file": SimpleUploadedFile("faq.csv", CSV), "source": ""}, headers=XHR)

    assert (Job.objects.get().result["source"], set(Query.objects.values_list("source", flat=True))) == ("faq", {"faq"})
