"""The knowledge console: the list of knowledge bases, one expert's page, upload, search, chunking and actions."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from jobs.models import Job
from knowledge import ingest
from knowledge.models import Document

pytestmark = pytest.mark.django_db
PAGE = "/knowledge/dmv/"


@pytest.fixture
def console(client, owner):
    # Experts without a team are changed by staff only (experts.access): the owner here is staff.
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    client.force_login(owner)
    return client


@pytest.fixture
def filled(kb, dmv):
    ingest.ingest_files(dmv, [
        ("renew.md", b"# Renewals\n\nRenew your driving licence online before it expires."),
        ("plates.txt", b"Licence plates\n\nOrder replacement plates at a service centre."),
    ])
    return dmv


def test_strangers_are_sent_to_log_in(client, kb, dmv):
    for url in ("/knowledge/", PAGE, f"{PAGE}search/?q=x"):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


def test_the_list_shows_every_expert_with_its_counts(console, filled, ssa):
    response = console.get("/knowledge/")

    body = response.content.decode()
    assert response.status_code == 200
    assert 'href="/knowledge/dmv/"' in body
    assert "Social Security" in body
    assert "test-hashing-encoder" in body
    assert "not built" in body  # ssa has no collection yet
    assert 'aria-current="page">Knowledge' in body


def test_the_list_offers_to_reembed_collections_of_another_model(console, filled, settings):
    settings.EMBEDDING_MODEL = "a-newer-model"

    body = console.get("/knowledge/").content.decode()

    assert 'id="stale-models"' in body
    assert "Re-embed them" in body


def test_the_expert_page_lists_documents_with_version_chunks_and_indexing(console, filled):
    Document.objects.filter(external_id="plates.txt").update(indexed_at=None, index_error="RuntimeError: encoder crashed")

    response = console.get(PAGE)

    body = response.content.decode()
    assert response.status_code == 200
    renew = Document.objects.get(external_id="renew.md")
    assert f'id="document-{renew.pk}"' in body
    assert "Renewals" in body
    assert "v1" in body
    assert "RuntimeError: encoder crashed" in body
    assert "could not be indexed" in body
    assert 'id="import-form"' in body
    assert 'multiple' in body
    assert "expert_dmv" in body


def test_an_upload_from_the_page_answers_json_with_the_job(console, kb, dmv, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = console.post(f"{PAGE}upload/", {"files": [SimpleUploadedFile("a.txt", b"Renew online."), SimpleUploadedFile("b.txt", b"Plates.")]},
                                HTTP_X_REQUESTED_WITH="XMLHttpRequest")

    assert response.status_code == 202
    job = Job.objects.get()
    assert response.json() == {"job": job.pk, "job_url": f"/jobs/{job.pk}/"}
    assert job.status == "succeeded"
    assert Document.objects.count() == 2


def test_an_upload_without_javascript_redirects_to_the_job(console, kb, dmv):
    response = console.post(f"{PAGE}upload/", {"files": [SimpleUploadedFile("a.txt", b"Renew online.")]})

    assert response.status_code == 302
    assert response["Location"] == f"/jobs/{Job.objects.get().pk}/"


def test_a_binary_file_is_refused_on_the_page(console, kb, dmv):
    response = console.post(f"{PAGE}upload/", {"files": [SimpleUploadedFile("x.txt", b"\x00\x01binary\x02" * 50)]}, HTTP_X_REQUESTED_WITH="XMLHttpRequest")

    assert response.status_code == 400
    assert response.json() == {"error": {"message": "x.txt: this is a binary file, not text, HTML, PDF or a Word document."}}
    assert not Job.objects.exists()


@override_settings(DOCUMENT_UPLOAD_MAX_BYTES=100)
def test_an_oversized_upload_is_refused_before_it_is_read(console, kb, dmv):
    response = console.generic("POST", f"{PAGE}upload/", b"x" * 70_000, content_type="multipart/form-data; boundary=zzz", HTTP_X_REQUESTED_WITH="XMLHttpRequest")

    assert response.status_code == 413
    assert response.json()["error"]["message"] == "The upload is 70,000 bytes; the limit is 100 bytes."


def test_the_upload_still_checks_csrf(client, owner, kb, dmv):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(owner)

    response = strict.post(f"{PAGE}upload/", {"files": [SimpleUploadedFile("a.txt", b"Renew online.")]})

    assert response.status_code == 403


def test_search_shows_dense_sparse_and_hybrid_results(console, filled):
    response = console.get(f"{PAGE}search/", {"q": "replacement plates"}, HTTP_HX_REQUEST="true")

    body = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in body  # the fragment alone
    for method in ("dense", "sparse", "hybrid"):
        assert f'id="results-{method}"' in body
    hybrid = body[body.index('id="results-hybrid"'):]
    assert re.findall(r"<strong>([^<]+)</strong>", hybrid)[0] == "Licence plates"
    assert "Order replacement plates" in hybrid


def test_an_empty_search_is_refused_in_place(console, filled):
    response = console.get(f"{PAGE}search/", {"q": ""}, HTTP_HX_REQUEST="true")

    assert response.status_code == 400
    assert "Type something to search for." in response.content.decode()


def test_saving_new_chunking_starts_a_rebuild(console, filled, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = console.post(f"{PAGE}chunking/", {"chunk_size": 500, "chunk_overlap": 100})

    job = Job.objects.get(kind="rebuild_index")
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.status == "succeeded"
    filled.refresh_from_db()
    assert (filled.chunk_size, filled.chunk_overlap) == (500, 100)


def test_bad_chunking_is_refused_with_the_reason(console, filled):
    response = console.post(f"{PAGE}chunking/", {"chunk_size": 400, "chunk_overlap": 300})

    assert response.status_code == 400
    assert "The overlap must be less than half the chunk size (200)." in response.content.decode()
    assert not Job.objects.exists()


@pytest.mark.parametrize(("action", "kind"), [("index", "index_documents"), ("rebuild", "rebuild_index"), ("drop", "drop_collection")])
def test_maintenance_buttons_start_their_job(console, filled, action, kind, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = console.post(f"{PAGE}{action}/")

    job = Job.objects.get(kind=kind)
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.status == "succeeded"


def test_deleting_a_document_comes_back_to_the_page(console, filled, django_capture_on_commit_callbacks):
    document = Document.objects.get(external_id="plates.txt")
    with django_capture_on_commit_callbacks(execute=True):
        response = console.post(f"{PAGE}documents/{document.pk}/delete/", follow=True)

    assert response.redirect_chain[-1][0] == PAGE
    assert "Deleting &#x27;Licence plates&#x27;" in response.content.decode()
    assert not Document.objects.filter(pk=document.pk).exists()


def test_get_is_not_allowed_on_actions(console, filled):
    assert console.get(f"{PAGE}drop/").status_code == 405


# --- teams ---------------------------------------------------------------------------------------

@pytest.fixture
def teams(dmv, ssa, django_user_model):
    from django.contrib.auth.models import Group

    roads, pensions = Group.objects.create(name="roads"), Group.objects.create(name="pensions")
    dmv.team, ssa.team = roads, pensions
    dmv.save(update_fields=["team"])
    ssa.save(update_fields=["team"])
    member = django_user_model.objects.create_user("rita", "rita@example.com", "pw-rita-1234")
    member.groups.add(roads)
    return member


def test_a_team_member_sees_only_their_teams_knowledge_bases(client, kb, teams):
    client.force_login(teams)

    body = client.get("/knowledge/").content.decode()

    assert 'href="/knowledge/dmv/"' in body
    assert "/knowledge/ssa/" not in body
    assert client.get("/knowledge/ssa/").status_code == 404
    assert client.get("/knowledge/ssa/search/?q=pension").status_code == 404


def test_a_team_member_edits_their_expert_but_not_anothers(client, kb, teams):
    client.force_login(teams)

    own = client.get(PAGE).content.decode()
    assert 'id="import-form"' in own
    assert 'id="chunking"' in own

    assert client.post("/knowledge/ssa/index/").status_code == 404  # cannot even see it
    assert client.post(f"{PAGE}chunking/", {"chunk_size": 0, "chunk_overlap": 0}).status_code == 400  # own expert: validated


def test_a_reader_of_a_teamless_expert_gets_403_for_changes_and_no_edit_forms(client, kb, dmv, owner):
    client.force_login(owner)  # not staff, and dmv has no team: visible, not changeable

    body = client.get(PAGE).content.decode()

    assert 'id="import-form"' not in body
    assert 'id="chunking"' not in body
    assert client.post(f"{PAGE}index/").status_code == 403
    assert client.post("/knowledge/reembed/").status_code == 403


def test_a_search_without_javascript_renders_the_whole_page(console, filled):
    response = console.get(f"{PAGE}search/", {"q": "renew licence"})

    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="documents-card"' in body
    assert 'id="search-results"' in body


def test_the_search_url_without_a_question_shows_the_page_and_an_empty_question_is_refused(console, filled):
    assert console.get(f"{PAGE}search/").status_code == 200
    assert console.get(f"{PAGE}search/", {"q": ""}).status_code == 400
