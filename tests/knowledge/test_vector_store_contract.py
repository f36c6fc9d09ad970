"""One behaviour contract for every vector store: embedded Qdrant always, a Qdrant server when QDRANT_URL is set."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest

from knowledge.ml.sparse import bm25_vector
from knowledge.stores import PointRecord
from knowledge.stores.embedded import EmbeddedQdrantStore
from knowledge.stores.qdrant_server import ServerQdrantStore

DIM = 8


def _stores():
    params = [pytest.param("embedded", id="embedded")]
    params.append(pytest.param("server", id="server", marks=pytest.mark.skipif(not os.environ.get("QDRANT_URL"), reason="QDRANT_URL is not set: no Qdrant server to test against")))
    return params


@pytest.fixture(params=_stores())
def store(request, tmp_path):
    if request.param == "embedded":
        s = EmbeddedQdrantStore(tmp_path / "qdrant")
        yield s
        s.close()
    else:
        yield ServerQdrantStore(os.environ["QDRANT_URL"], api_key=os.environ.get("QDRANT_API_KEY") or None)


def vec(i: int) -> list[float]:
    v = np.zeros(DIM, dtype=np.float32)
    v[i % DIM] = 1.0
    v[(i + 1) % DIM] = 0.3
    return (v / np.linalg.norm(v)).tolist()


def point(doc: int, pos: int, text: str, axis: int) -> PointRecord:
    idx, val = bm25_vector(text)
    return PointRecord(id=str(uuid.uuid5(uuid.NAMESPACE_OID, f"{doc}:{pos}:{text}")), dense=vec(axis), sparse_indices=idx, sparse_values=val,
                       payload={"document_id": doc, "text": text, "position": pos})


def search(store, name, text, axis, limit=5):
    idx, val = bm25_vector(text, query=True)
    return store.search(name, vec(axis), idx, val, limit=limit)


def test_search_finds_the_closest_chunk_with_its_payload(store):
    name = f"contract_{uuid.uuid4().hex[:8]}"
    store.ensure_collection(name, DIM)
    store.replace_documents(name, {1: [point(1, 0, "renew licence online", 0), point(1, 1, "vision test rules", 3)], 2: [point(2, 0, "retirement benefits", 5)]})
    hits = search(store, name, "retirement benefits", 5)
    assert hits[0].payload["text"] == "retirement benefits"
    assert hits[0].dense_score == pytest.approx(1.0, abs=1e-4)
    assert store.count(name) == 3
    store.drop(name)


def test_replacing_a_document_swaps_all_its_chunks(store):
    name = f"contract_{uuid.uuid4().hex[:8]}"
    store.ensure_collection(name, DIM)
    store.replace_documents(name, {1: [point(1, 0, "old text one", 0), point(1, 1, "old text two", 1)], 2: [point(2, 0, "other doc", 4)]})
    store.replace_documents(name, {1: [point(1, 0, "new text", 0)]})
    texts = {h.payload["text"] for h in search(store, name, "text", 0, limit=10)}
    assert "new text" in texts
    assert not texts & {"old text one", "old text two"}
    assert store.count(name) == 2
    store.delete_document(name, 1)
    assert store.count(name) == 1
    store.drop(name)


def test_rebuild_switches_to_the_new_contents_in_one_step(store):
    name = f"contract_{uuid.uuid4().hex[:8]}"
    store.ensure_collection(name, DIM)
    store.replace_documents(name, {1: [point(1, 0, "before", 0)]})
    store.rebuild(name, DIM, [point(7, 0, "after one", 2), point(7, 1, "after two", 3)])
    assert {h.payload["text"] for h in search(store, name, "after", 2)} == {"after one", "after two"}
    store.drop(name)
    assert store.count(name) == 0
    assert search(store, name, "after", 2) == []


def test_embedded_readers_in_other_processes_see_each_new_snapshot(tmp_path):
    """The web process keeps a snapshot open while a worker writes: the writer never needs its lock."""
    reader = EmbeddedQdrantStore(tmp_path / "q")
    writer = EmbeddedQdrantStore(tmp_path / "q")  # a second store object stands in for another process
    name = "shared"
    writer.ensure_collection(name, DIM)
    writer.replace_documents(name, {1: [point(1, 0, "first", 0)]})
    assert search(reader, name, "first", 0)[0].payload["text"] == "first"
    writer.replace_documents(name, {2: [point(2, 0, "second", 4)]})
    assert search(reader, name, "second", 4)[0].payload["text"] == "second"
    snapshots = [p for p in (tmp_path / "q" / name).iterdir() if p.is_dir()]
    assert len(snapshots) <= 2  # old snapshots are collected once nobody holds them
    reader.close()
    writer.close()


@pytest.mark.parametrize("method", ["dense", "sparse", "hybrid"])
def test_each_search_method_finds_its_own_kind_of_match(store, method):
    name = f"contract_{uuid.uuid4().hex[:8]}"
    store.ensure_collection(name, DIM)
    store.replace_documents(name, {1: [point(1, 0, "renew licence online", 0), point(1, 1, "retirement benefits", 5)]})

    hits = search_with(store, name, "retirement benefits", 5, method)

    assert hits[0].payload["text"] == "retirement benefits"
    assert hits[0].collection == name
    if method == "sparse":
        assert hits[0].sparse_score > 0
    store.drop(name)


def search_with(store, name, text, axis, method, limit=5):
    idx, val = bm25_vector(text, query=True)
    return store.search(name, vec(axis), idx, val, limit=limit, method=method)


def test_an_unknown_method_is_refused(store):
    with pytest.raises(ValueError, match="unknown search method"):
        store.search("anything", vec(0), [], [], method="fuzzy")


def test_search_many_ranks_across_collections_and_honours_weights(store):
    first, second = f"contract_{uuid.uuid4().hex[:8]}", f"contract_{uuid.uuid4().hex[:8]}"
    for name in (first, second):
        store.ensure_collection(name, DIM)
    store.replace_documents(first, {1: [point(1, 0, "renew licence online", 0)]})
    store.replace_documents(second, {2: [point(2, 0, "renew licence online today", 0)]})
    idx, val = bm25_vector("renew licence", query=True)

    even = store.search_many([first, second], vec(0), idx, val, limit=5)
    tilted = store.search_many([first, second], vec(0), idx, val, limit=5, weights=[0.1, 0.9])
    only_first = store.search_many([first, second], vec(0), idx, val, limit=5, weights=[1.0, 0.0])

    assert {h.collection for h in even} == {first, second}
    assert tilted[0].collection == second
    assert [h.collection for h in only_first] == [first]
    assert store.search_many([f"missing_{uuid.uuid4().hex[:6]}"], vec(0), idx, val) == []
    store.drop(first)
    store.drop(second)


def test_embedded_readers_never_lock_the_snapshot_they_search(tmp_path):
    """A reader keeps serving from memory even after a writer's garbage collection removed its snapshot."""
    reader = EmbeddedQdrantStore(tmp_path / "q")
    writer = EmbeddedQdrantStore(tmp_path / "q")
    writer.ensure_collection("c", DIM)
    writer.replace_documents("c", {1: [point(1, 0, "first", 0)]})
    assert search(reader, "c", "first", 0)[0].payload["text"] == "first"

    for i in range(3):
        writer.replace_documents("c", {2 + i: [point(2 + i, 0, f"more {i}", 4)]})

    assert len([p for p in (tmp_path / "q" / "c").iterdir() if p.is_dir()]) == 1  # nothing held the old ones
    assert reader.count("c") == 4


def test_embedded_store_reads_a_snapshot_written_before_indexes_were_saved(tmp_path):
    import shutil

    store = EmbeddedQdrantStore(tmp_path / "q")
    store.ensure_collection("old", DIM)
    store.replace_documents("old", {1: [point(1, 0, "legacy text", 2)]})
    active = (tmp_path / "q" / "old" / "ACTIVE").read_text().strip()
    shutil.rmtree(tmp_path / "q" / "old" / active / "hybrid")

    fresh = EmbeddedQdrantStore(tmp_path / "q")
    assert search(fresh, "old", "legacy text", 2)[0].payload["text"] == "legacy text"


def test_evidence_is_each_collections_best_cosine_and_keyword_score(store):
    names = [f"contract_{uuid.uuid4().hex[:8]}" for _ in range(3)]
    store.ensure_collection(names[0], DIM)
    store.replace_documents(names[0], {1: [point(1, 0, "renew licence online", 0), point(1, 1, "vision test rules", 3)]})
    store.ensure_collection(names[1], DIM)
    store.replace_documents(names[1], {2: [point(2, 0, "retirement benefits", 5)]})
    store.ensure_collection(names[2], DIM)  # exists, holds nothing
    idx, val = bm25_vector("renew my licence", query=True)
    found = store.evidence([*names, "contract_missing"], vec(0), idx, val)
    dense, keywords = found[names[0]]
    assert dense == pytest.approx(1.0, abs=1e-4)
    assert keywords > 0
    other_dense, other_keywords = found[names[1]]
    assert other_dense < 0.5
    assert other_keywords == 0.0  # none of the question's words is in its documents
    assert found[names[2]] is None
    assert found["contract_missing"] is None
    for name in names:
        store.drop(name)
