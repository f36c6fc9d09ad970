"""Ingesting and indexing documents: versions by content hash, atomic replacement, failures that change nothing."""

from __future__ import annotations

import pytest

from knowledge import indexing, ingest, search, selectors, services
from knowledge.models import Document, KnowledgeBase
from knowledge.selectors import collection_name
from tests.support.hashing_encoder import crash_on

from .conftest import make_pdf

pytestmark = pytest.mark.django_db

RENEW = b"Renewing a licence\n\nYou can renew your driving licence online up to six months before it expires."
RENEW_V2 = b"Renewing a licence\n\nFrom March you renew your driving licence at any service centre or online."


def texts(store, expert, query="licence renew", limit=10):
    return [h.payload["text"] for h in search.search_expert(expert, query, limit=limit)]


def test_a_new_file_is_stored_indexed_and_searchable(kb, dmv):
    report = ingest.ingest_files(dmv, [("renew.txt", RENEW)])

    document = Document.objects.get()
    assert report.as_dict()["created"] == 1
    assert (document.external_id, document.title, document.version) == ("renew.txt", "Renewing a licence", 1)
    assert document.indexed_at is not None
    assert document.chunk_count == kb.count(collection_name(dmv)) >= 1
    hit = search.search_expert(dmv, "renew driving licence online")[0]
    assert hit.payload["document_id"] == document.pk
    assert hit.payload["title"] == "Renewing a licence"
    assert hit.payload["expert"] == "dmv"
    assert {"position", "heading", "url", "document_version"} <= set(hit.payload)


def test_the_same_file_again_changes_nothing(kb, dmv, encoder_stub):
    ingest.ingest_files(dmv, [("renew.txt", RENEW)])
    before = Document.objects.get()
    calls = encoder_stub.calls

    report = ingest.ingest_files(dmv, [("renew.txt", RENEW)])

    after = Document.objects.get()
    assert report.as_dict()["unchanged"] == 1
    assert report.indexing == {}
    assert (after.version, after.indexed_at, after.content_hash) == (before.version, before.indexed_at, before.content_hash)
    assert encoder_stub.calls == calls  # nothing was embedded again


def test_a_changed_file_becomes_a_new_version_that_replaces_the_old_chunks(kb, dmv):
    ingest.ingest_files(dmv, [("renew.txt", RENEW)])
    ingest.ingest_files(dmv, [("renew.txt", RENEW_V2)])

    document = Document.objects.get()
    assert document.version == 2
    found = texts(kb, dmv)
    assert any("service centre" in t for t in found)
    assert not any("six months" in t for t in found)
    assert kb.count(collection_name(dmv)) == document.chunk_count
    assert {h.payload["document_version"] for h in search.search_expert(dmv, "licence", limit=10)} == {2}


def test_when_indexing_fails_the_previous_version_keeps_serving(kb, dmv, monkeypatch):
    ingest.ingest_files(dmv, [("renew.txt", RENEW)])

    def broken(*args, **kwargs):
        raise OSError("disk full")

    working = type(kb).replace_documents
    monkeypatch.setattr(type(kb), "replace_documents", broken)
    with pytest.raises(OSError, match="disk full"):
        ingest.ingest_files(dmv, [("renew.txt", RENEW_V2)])

    document = Document.objects.get()
    assert document.version == 2
    assert document.indexed_at is None
    assert "the previous version keeps serving" in document.index_error
    found = texts(kb, dmv)
    assert any("six months" in t for t in found)  # version 1 still answers
    assert not any("service centre" in t for t in found)

    monkeypatch.setattr(type(kb), "replace_documents", working)
    result = indexing.index_pending(dmv)  # a retry clears the error and swaps version 2 in

    document.refresh_from_db()
    assert result["documents"] == 1
    assert (document.indexed_at is not None, document.index_error) == (True, "")
    assert any("service centre" in t for t in texts(kb, dmv))


def test_a_store_that_fails_half_way_leaves_no_half_written_snapshot(kb, dmv, monkeypatch):
    ingest.ingest_files(dmv, [("renew.txt", RENEW)])
    name = collection_name(dmv)
    before = kb.count(name)
    from knowledge.stores import edge

    def crash(points):  # after the version copied the old points, before the new ones are in
        raise RuntimeError("crashed mid-write")

    monkeypatch.setattr(edge, "_points", crash)
    big = "\n\n".join(f"Paragraph {i} about licence renewal rules and fees." * 3 for i in range(400)).encode()
    with pytest.raises(RuntimeError):
        ingest.ingest_files(dmv, [("renew.txt", big)])

    assert kb.count(name) == before
    snapshots = [p for p in (kb.root / name).iterdir() if p.is_dir()]
    assert len(snapshots) == 1


def test_files_that_cannot_be_read_are_reported_and_the_others_ingested(kb, dmv):
    report = ingest.ingest_files(dmv, [
        ("good.pdf", make_pdf("Licence plates\nOrder new plates online")),
        ("broken.pdf", b"%PDF-1.4\n\x00\x01 not really a pdf"),
        ("empty.txt", b""),
        ("photo.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))),
    ])

    errors = {f["file"]: f["error"] for f in report.failed}
    assert set(errors) == {"broken.pdf", "empty.txt", "photo.txt"}
    assert errors["empty.txt"] == "the file is empty"
    assert "binary file" in errors["photo.txt"]
    assert list(Document.objects.values_list("external_id", flat=True)) == ["good.pdf"]
    assert Document.objects.get().indexed_at is not None


def test_a_path_traversal_name_is_stored_under_its_safe_name(kb, dmv):
    ingest.ingest_files(dmv, [("../../etc/passwd", b"root account notes\n\nnothing secret")])

    assert Document.objects.get().external_id == "passwd"


def test_indexing_records_the_embedding_model_and_a_new_model_reembeds_everything(kb, dmv, encoder_stub, settings):
    ingest.ingest_files(dmv, [("renew.txt", RENEW)])
    assert KnowledgeBase.objects.get(expert=dmv).embedding_model == "test-hashing-encoder"

    encoder_stub.name = settings.EMBEDDING_MODEL = "another-model"
    assert selectors.model_mismatch(dmv).startswith("built with test-hashing-encoder, but the encoder now makes another-model vectors")

    result = indexing.index_pending(dmv)

    assert result["reembedded"] is True
    assert KnowledgeBase.objects.get(expert=dmv).embedding_model == "another-model"
    assert KnowledgeBase.objects.get(expert=dmv).built_at is not None


def test_search_falls_back_to_keywords_while_the_model_does_not_match(kb, dmv, settings):
    ingest.ingest_files(dmv, [("renew.txt", RENEW)])
    settings.EMBEDDING_MODEL = "a-newer-model"

    hits = search.search_expert(dmv, "renew licence online")

    assert hits
    assert all(h.sparse_score > 0 for h in hits)


def test_rebuild_rechunks_with_new_settings_behind_the_pointer(kb, dmv):
    long_text = ("Licence renewal. " * 40 + "\n\n") * 6
    ingest.ingest_files(dmv, [("long.txt", long_text.encode())])
    before = Document.objects.get().chunk_count

    job = services.update_chunking(dmv, 1000, 100)
    result = indexing.rebuild_index(dmv)

    assert job is not None
    assert job.kind == "rebuild_index"
    document = Document.objects.get()
    assert document.chunk_count == result["chunks"] < before
    assert kb.count(collection_name(dmv)) == document.chunk_count
    kbase = KnowledgeBase.objects.get(expert=dmv)
    assert (kbase.chunk_size, kbase.chunk_overlap) == (1000, 100)


def test_chunking_outside_its_limits_is_refused(kb, dmv):
    with pytest.raises(ValueError, match="between 100 and 8000"):
        services.update_chunking(dmv, 50, 0)
    with pytest.raises(ValueError, match="less than half"):
        services.update_chunking(dmv, 400, 200)


def test_delete_and_drop_are_idempotent(kb, dmv):
    ingest.ingest_files(dmv, [("a.txt", b"Licence renewal rules"), ("b.txt", b"Vehicle registration rules")])
    first = Document.objects.get(external_id="a.txt")

    assert indexing.delete_document_by_id(dmv, first.pk) == {"document": first.pk, "deleted": True}
    assert indexing.delete_document_by_id(dmv, first.pk) == {"document": first.pk, "deleted": False}
    assert kb.count(collection_name(dmv)) == Document.objects.get().chunk_count

    dropped = indexing.drop_collection(dmv)
    again = indexing.drop_collection(dmv)

    assert dropped == {"dropped_chunks": 1, "documents_pending": 1}
    assert again == {"dropped_chunks": 0, "documents_pending": 1}
    assert kb.count(collection_name(dmv)) == 0
    assert not KnowledgeBase.objects.exists()
    assert indexing.index_pending(dmv)["documents"] == 1  # documents stay: indexing brings the collection back
    assert kb.count(collection_name(dmv)) == 1


def test_a_rebuild_that_fails_on_one_document_keeps_the_old_collection(kb, dmv, monkeypatch, encoder_stub):
    ingest.ingest_files(dmv, [("a.txt", b"Licence renewal online"), ("b.txt", b"Vehicle registration fees")])
    before = kb.count(collection_name(dmv))
    crash_on(monkeypatch, encoder_stub, "registration")
    with pytest.raises(RuntimeError, match="encoder crashed"):
        indexing.rebuild_index(dmv)

    assert kb.count(collection_name(dmv)) == before
    assert "the previous collection keeps serving" in Document.objects.get(external_id="b.txt").index_error
    assert Document.objects.get(external_id="b.txt").indexed_at is not None  # its indexed version still serves
    assert Document.objects.get(external_id="a.txt").index_error == ""


def test_each_chunk_carries_its_sentence_vectors_for_the_extractive_answer(kb, dmv, settings, encoder_stub):
    from experts.ml.extractive import split_sentences

    get_encoder = search.get_encoder  # the hashing encoder (encoder_stub)
    ingest.ingest_files(dmv, [("renew.txt", RENEW)])
    hit = search.search_expert(dmv, "renew driving licence online")[0]
    vectors = search.sentence_vector_reader(hit.payload)()
    assert hit.payload["sentence_model"] == get_encoder().name
    assert vectors.shape == (len(split_sentences(hit.payload["text"])), get_encoder().dimension)
    settings.INDEX_SENTENCE_VECTORS = False
    ingest.ingest_files(dmv, [("renew-v2.txt", RENEW_V2)])
    plain = [h for h in search.search_expert(dmv, "service centre", limit=10) if "From March" in h.payload["text"]]
    assert plain
    assert "sentence_vectors" not in plain[0].payload
    assert search.sentence_vector_reader(plain[0].payload) is None


def test_every_chunk_is_searchable_before_the_sentence_vectors_are_made(kb, dmv, monkeypatch):
    made_when: list[tuple[int, int]] = []
    real = indexing.sentence_payloads

    def sentence_payloads(chunks, seconds=None):
        made_when.append((Document.objects.filter(expert=dmv, indexed_at__isnull=True).count(), kb.count(collection_name(dmv))))
        return real(chunks, seconds)

    monkeypatch.setattr(indexing, "sentence_payloads", sentence_payloads)
    monkeypatch.setattr(indexing, "SENTENCE_WRITE_CHUNKS", 1)  # one write per chunk
    ingest.ingest_files(dmv, [("renew.txt", RENEW), ("b.txt", b"Vehicle registration fees. Pay online.")], index=False)
    result = indexing.index_pending(dmv, batch_size=1)

    assert result["chunks"] >= 2
    assert made_when == [(0, result["chunks"])] * result["chunks"]  # both batches written, every document indexed, before the first sentence
    assert min(result["sentences_s"], result["sentences_cpu_s"], result["seconds"]["sentences"]) >= 0
    hits = search.search_expert(dmv, "renew driving licence online", limit=10)
    assert hits
    assert all(search.sentence_vector_reader(h.payload) is not None for h in hits)


def test_a_rebuilt_collection_gets_its_sentence_vectors_too(kb, dmv):
    ingest.ingest_files(dmv, [("renew.txt", RENEW)])

    indexing.rebuild_index(dmv)

    hits = search.search_expert(dmv, "renew driving licence online", limit=10)
    assert hits
    assert all(search.sentence_vector_reader(h.payload) is not None for h in hits)

