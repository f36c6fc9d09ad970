"""Indexed chunks carry their section's title, the page's address and source."""

from __future__ import annotations

import json

import pytest

from knowledge import ingest, search
from knowledge.ml import chunking
from knowledge.models import Document

pytestmark = pytest.mark.django_db

GUIDE = (
    "Renew by mail\nComplete the renewal notice we sent you and return it in the envelope provided with your payment. "
    "Be sure to include a check or money order payable to the Commissioner of Motor Vehicles.\n\n"
    "Renew online\nUse the website to renew your non-driver ID card if your document type stays the same. "
    "If you already have an Enhanced or REAL ID, you can renew online and keep it.\n"
)


def ingest_jsonl(expert, row: dict) -> None:
    ingest.ingest_files(expert, [("guide.jsonl", json.dumps(row).encode())])


def test_each_chunk_is_titled_by_its_document_and_section(kb, dmv):
    ingest_jsonl(dmv, {"id": "renew", "title": "Renew non-driver ID card", "text": GUIDE})

    hit = search.search_expert(dmv, "renew by mail envelope")[0]
    assert hit.payload["title"] == "Renew non-driver ID card — Renew by mail"
    assert hit.payload["document_title"] == "Renew non-driver ID card"
    assert hit.payload["heading"] == "Renew by mail"
    assert hit.payload["text"].startswith("Complete the renewal notice")
    assert Document.objects.get().chunk_count == 2


def test_chunking_by_paragraphs_keeps_the_document_title(kb, dmv, monkeypatch):
    monkeypatch.setattr(chunking, "CHUNK_BY_SECTIONS", False)
    ingest_jsonl(dmv, {"id": "renew", "title": "Renew non-driver ID card", "text": GUIDE})

    assert {h.payload["title"] for h in search.search_expert(dmv, "renew", limit=10)} == {"Renew non-driver ID card"}


def test_a_url_in_the_metadata_reaches_the_citation_and_so_does_the_source(kb, dmv):
    ingest_jsonl(dmv, {"id": "renew", "title": "Renew", "text": GUIDE,
                       "metadata": {"url": "https://dmv.ny.gov/renew", "source": "doc2dial: a dmv.ny.gov page"}})

    hit = search.search_expert(dmv, "renew by mail")[0]
    assert (hit.payload["url"], hit.payload["source"]) == ("https://dmv.ny.gov/renew", "doc2dial: a dmv.ny.gov page")


def test_the_documents_own_url_wins_and_a_non_web_address_is_never_a_citation_link(kb, dmv):
    ingest_jsonl(dmv, {"id": "a", "title": "A", "text": GUIDE, "url": "https://dmv.ny.gov/a", "metadata": {"url": "https://elsewhere.example"}})
    ingest_jsonl(dmv, {"id": "b", "title": "B", "text": GUIDE, "metadata": {"url": "javascript:alert(1)"}})

    urls = {h.payload["document_title"]: h.payload["url"] for h in search.search_expert(dmv, "renew", limit=10)}
    assert urls == {"A": "https://dmv.ny.gov/a", "B": ""}
