"""Documents indexed together: one encoder call for all their chunks, and each document gets exactly the points it would
get alone (same chunks, same vectors, same payloads); their sentence vectors come after, one call for the distinct sentences."""

from __future__ import annotations

import pytest

from knowledge import ingest, points
from knowledge.models import Document
from tests.support.hashing_encoder import crash_on

pytestmark = pytest.mark.django_db

PAGES = [
    ("renew.txt", b"Renewing a licence\n\nYou can renew your driving licence online. Bring your old licence. " * 12),
    ("plates.txt", b"Licence plates\n\nOrder new plates online. Bring your old licence. Plates arrive in ten days."),
    ("fees.txt", b"Fees\n\nRegistration fees depend on the vehicle's weight. Pay online or at a service centre. " * 6),
]


@pytest.fixture
def documents(kb, dmv):
    ingest.ingest_files(dmv, PAGES, index=False)
    return list(Document.objects.order_by("pk"))


def test_documents_embedded_together_get_the_points_each_gets_alone(documents, dmv):
    together = points.documents_points(dmv, documents)

    for document in documents:
        alone = points.documents_points(dmv, [document])[document.pk]
        assert len(together[document.pk]) == len(alone) > 0
        for a, b in zip(together[document.pk], alone, strict=True):
            assert (a.id, a.dense, a.sparse_indices, a.sparse_values, a.payload) == (b.id, b.dense, b.sparse_indices, b.sparse_values, b.payload)


def test_a_batch_of_documents_takes_one_encoder_call_and_its_sentences_one_more_each_sentence_once(documents, dmv, encoder_stub, monkeypatch):
    seen: list[list[str]] = []
    real = encoder_stub.encode

    def encode(texts, batch_size=64):
        seen.append(list(texts))
        return real(texts, batch_size)

    monkeypatch.setattr(encoder_stub, "encode", encode)
    batch = points.documents_points(dmv, documents)
    (chunks,) = seen
    assert len(chunks) == sum(len(p) for p in batch.values()) > len(documents)
    assert not any("sentence_vectors" in p.payload for ps in batch.values() for p in ps)

    payloads = points.sentence_payloads({p.id: p.payload["text"] for ps in batch.values() for p in ps})
    _, sentences = seen
    assert len(sentences) == len(set(sentences))
    assert "Bring your old licence." in sentences  # shared by two documents, encoded once
    assert set(payloads) == {p.id for ps in batch.values() for p in ps}


def test_seconds_gain_the_time_spent_chunking_and_embedding(documents, dmv):
    seconds = {"chunk": 1.0}

    points.documents_points(dmv, documents, seconds)

    assert set(seconds) == {"chunk", "embed"}
    assert seconds["chunk"] > 1.0
    assert seconds["embed"] > 0.0
    points.sentence_payloads({"a": "One sentence. Another one."}, seconds)
    assert seconds["sentences"] > 0.0


def test_a_document_that_cannot_be_embedded_keeps_its_error_and_the_rest_of_its_batch_is_indexed(documents, dmv, encoder_stub, monkeypatch):
    from knowledge import indexing

    crash_on(monkeypatch, encoder_stub, "Registration fees")
    result = indexing.index_pending(dmv)

    fees = Document.objects.get(external_id="fees.txt")
    assert (fees.indexed_at, fees.index_error) == (None, "RuntimeError: encoder crashed")
    assert set(Document.objects.exclude(pk=fees.pk).values_list("index_error", flat=True)) == {""}
    assert Document.objects.filter(indexed_at__isnull=False).count() == 2
    assert result["chunks"] == sum(Document.objects.values_list("chunk_count", flat=True)) > 0
