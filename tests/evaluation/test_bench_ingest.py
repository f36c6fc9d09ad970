"""``bench ingest`` on a small folder with the hashing encoder: its figures count what was indexed (the real run is `manage.py bench ingest`)."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from knowledge.models import Document
from knowledge.selectors import collection_name
from knowledge.stores import get_store
from tests.support.hashing_encoder import use_encoder

pytestmark = pytest.mark.django_db


@pytest.fixture
def folder(tmp_path, hashing, monkeypatch, settings):
    use_encoder(monkeypatch, hashing)
    settings.QDRANT_URL = ""
    settings.QDRANT_PATH = str(tmp_path / "qdrant")
    get_store.cache_clear()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "renew.txt").write_text("Renewing a licence\n\n" + "You can renew your driving licence online before it expires. " * 40)
    (docs / "more.jsonl").write_text(
        json.dumps({"doc_id": "a", "title": "Plates", "text": "Order new licence plates online or at a service centre."}) + "\n"
        + json.dumps({"doc_id": "b", "title": "Fees", "text": "Registration fees depend on the vehicle's weight."}) + "\n")
    yield docs
    get_store().close()
    get_store.cache_clear()


def test_it_reports_the_documents_and_passages_it_indexed(folder, tmp_path):
    out = tmp_path / "ingest.json"

    call_command("bench", "ingest", "--folder", str(folder), "--in-place", "--json", str(out))

    report = json.loads(out.read_text())
    indexed = sum(Document.objects.values_list("chunk_count", flat=True))
    assert (report["files"], report["documents"], report["failed_files"]) == (2, 3, 0)
    assert report["chunks"] == indexed == get_store().count(collection_name(Document.objects.first().expert))
    assert indexed > 3  # the long file was cut into several passages
    assert report["passages_per_s"] == report["chunks_per_s"] > report["documents_per_s"] > 0
    assert report["passages_per_s"] >= report["complete_passages_per_s"] > 0  # searchable first, sentence vectors after
    assert report["complete_s"] >= report["searchable_s"] > 0
    assert report["complete_cpu_ms_per_passage"] >= report["cpu_ms_per_passage"] > 0
    assert set(report["phases_s"]) == {"parse", "chunk", "embed", "write", "sentences"}
    assert report["disk_cache"] is False
    assert report["encoder_threads"] >= 1


def test_called_from_code_it_refuses_to_touch_the_callers_database_without_in_place(folder):
    with pytest.raises(CommandError, match="--in-place"):
        call_command("bench", "ingest", "--folder", str(folder))


def test_after_it_every_module_encodes_with_the_process_encoder():
    """The hashing encoder stays in the tests that asked for it. A module first imported under it kept it: knowledge.indexing,
    .points and .views did when this file ran first in a process, and test_answers_evaluation.py then indexed at 64 dimensions
    and searched with the real encoder's 384 (tests/conftest.py now imports them all before the first test)."""
    import sys

    from encoders import registry
    from tests.support.hashing_encoder import modules_binding_get_encoder

    assert {"knowledge.indexing", "knowledge.points", "knowledge.views", "serving.chat"} <= set(modules_binding_get_encoder())
    kept = [m for m in modules_binding_get_encoder() if m in sys.modules and sys.modules[m].get_encoder is not registry.get_encoder]
    assert kept == []
