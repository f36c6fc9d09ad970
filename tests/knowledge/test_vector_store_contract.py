"""One behaviour contract for every vector store: Qdrant Edge and the server store's code over qdrant-client's local mode
always, a Qdrant server when QDRANT_URL is set."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest

from knowledge.ml.sparse import bm25_vector
from knowledge.stores import PointRecord
from knowledge.stores.edge import EdgeQdrantStore
from knowledge.stores.qdrant_server import ServerQdrantStore
from tests.support.vector_points import DIM, point, vec


def _stores():
    params = [pytest.param("edge", id="edge"), pytest.param("local", id="server-code-in-local-mode")]
    params.append(pytest.param("server", id="server", marks=pytest.mark.skipif(not os.environ.get("QDRANT_URL"), reason="QDRANT_URL is not set: no Qdrant server to test against")))
    return params


@pytest.fixture(params=_stores())
def store(request, tmp_path):
    if request.param == "edge":
        s = EdgeQdrantStore(tmp_path / "qdrant")
        yield s
        s.close()
    elif request.param == "local":  # the server store's own code, over qdrant-client's local mode
        yield ServerQdrantStore(":memory:")
    else:
        yield ServerQdrantStore(os.environ["QDRANT_URL"], api_key=os.environ.get("QDRANT_API_KEY") or None)


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


def test_set_payloads_adds_keys_to_the_points_still_there_and_skips_the_others(store):
    name = f"contract_{uuid.uuid4().hex[:8]}"
    store.ensure_collection(name, DIM)
    kept, gone = point(1, 0, "renew licence online", 0), point(2, 0, "old plates", 4)
    store.replace_documents(name, {1: [kept], 2: [gone]})
    store.replace_documents(name, {2: [point(2, 0, "new plates", 4)]})  # re-indexed: its old point is gone

    store.set_payloads(name, {kept.id: {"extra": "kept"}, gone.id: {"extra": "gone"}})

    hits = {h.payload["text"]: h for h in search(store, name, "licence plates", 0, limit=10)}
    assert hits["renew licence online"].payload == {**kept.payload, "extra": "kept"}
    assert hits["renew licence online"].dense_score == pytest.approx(1.0, abs=1e-4)  # its vector unchanged
    assert "extra" not in hits["new plates"].payload
    assert store.count(name) == 2
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


def test_edge_readers_in_other_processes_see_each_new_version(tmp_path):
    """The web process keeps a shard loaded while a worker process writes: neither needs the other's lock."""
    import subprocess
    import sys

    reader = EdgeQdrantStore(tmp_path / "q")
    writer = EdgeQdrantStore(tmp_path / "q")
    name = "shared"
    writer.ensure_collection(name, DIM)
    writer.replace_documents(name, {1: [point(1, 0, "first", 0)]})
    assert search(reader, name, "first", 0)[0].payload["text"] == "first"
    script = ("import sys; from tests.support.vector_points import point; from knowledge.stores.edge import EdgeQdrantStore; "
              "EdgeQdrantStore(sys.argv[1]).replace_documents('shared', {2: [point(2, 0, 'second', 4)]})")
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "q")], check=True, env={**os.environ, "PYTHONPATH": f"platform:.:{os.environ.get('PYTHONPATH', '')}"})
    assert search(reader, name, "second", 4)[0].payload["text"] == "second"
    assert reader.count(name) == 2
    versions = [p for p in (tmp_path / "q" / name).iterdir() if p.is_dir()]
    assert len(versions) == 1  # the writer removed the old version; the reader kept its open files until it moved on
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


def test_one_collections_fusion_is_qdrants_own_rrf(tmp_path):
    """``contract.search_many`` over one collection scores every chunk as Edge's ``Prefetch`` + ``Fusion.Rrf`` does."""
    import qdrant_edge as qe

    from knowledge.stores.contract import PREFETCH_FACTOR, RRF_K

    store = EdgeQdrantStore(tmp_path / "q")
    texts = ["renew licence online", "licence fees and renewal", "retirement benefits", "lost licence", "vision test for licence renewal",
             "apply for benefits online", "replace a lost card", "renew online today"]
    rng = np.random.default_rng(0)  # no two cosines alike: ties may break either way
    store.rebuild("c", DIM, [PointRecord(id=str(uuid.uuid4()), dense=rng.normal(size=DIM).tolist(), sparse_indices=bm25_vector(t)[0],
                                         sparse_values=bm25_vector(t)[1], payload={"document_id": 1, "text": t}) for t in texts])
    idx, val = bm25_vector("renew my licence online", query=True)
    query = rng.normal(size=DIM).tolist()
    ours = {h.payload["text"]: round(h.score, 5) for h in store.search("c", query, idx, val, limit=len(texts))}

    shard = store._shard("c")
    prefetch = [qe.Prefetch(limit=len(texts) * PREFETCH_FACTOR, query=qe.Query.Nearest(query, using="dense")),
                qe.Prefetch(limit=len(texts) * PREFETCH_FACTOR, query=qe.Query.Nearest(qe.SparseVector(idx, val), using="sparse"))]
    theirs = shard.query(qe.QueryRequest(limit=len(texts), prefetches=prefetch, query=qe.Fusion.Rrf(k=RRF_K), with_payload=True))
    assert ours == {p.payload["text"]: round(p.score, 5) for p in theirs}
    store.close()


def test_a_numpy_store_collection_is_converted_on_first_use(tmp_path):
    """An index the numpy store wrote (ACTIVE -> snapshot/hybrid/) serves at once, its BM25 terms recomputed by Qdrant's Bm25."""
    import json

    snapshot = tmp_path / "q" / "old" / "20261201000000-abcdef12" / "hybrid"
    snapshot.mkdir(parents=True)
    payloads = [{"document_id": 1, "title": "Licences", "text": "renew licence online"}, {"document_id": 2, "title": "Pensions", "text": "retirement benefits"}]
    np.save(snapshot / "dense.npy", np.asarray([vec(0), vec(5)], dtype=np.float32))
    (snapshot / "points.json").write_text(json.dumps({"ids": [str(uuid.uuid4()), str(uuid.uuid4())], "payloads": payloads}))
    (snapshot / "meta.json").write_text(json.dumps({"format": 1, "points": 2, "dimension": DIM}))
    (tmp_path / "q" / "old" / "ACTIVE").write_text("20261201000000-abcdef12")

    store = EdgeQdrantStore(tmp_path / "q")
    hits = search(store, "old", "pension retirement", 5)

    assert hits[0].payload["text"] == "retirement benefits"
    assert hits[0].sparse_score > 0  # its "retirement", the question's too
    assert store.count("old") == 2
    assert not (tmp_path / "q" / "old" / "ACTIVE").exists()
    converted = (tmp_path / "q" / "old" / "CURRENT").read_text()
    assert [p.name for p in (tmp_path / "q" / "old").iterdir() if p.is_dir()] == [converted]
    EdgeQdrantStore(tmp_path / "q")._write("old", keep_except=[], legacy_only=True)  # a process that waited for the lock to convert it too
    assert (tmp_path / "q" / "old" / "CURRENT").read_text() == converted
    store.close()


def test_a_collection_whose_terms_another_bm25_made_gets_them_made_again_on_first_use(tmp_path):
    """An older release's sparse vectors (another tokenizer or stemmer, another k) would miss the question's terms: the first
    search writes a version with each chunk's terms made again from its title and text, its dense vectors kept."""
    from knowledge.ml.sparse import MODEL
    from knowledge.stores.edge import SPARSE_FILE

    root = tmp_path / "q"
    old = EdgeQdrantStore(root)
    old.ensure_collection("c", DIM)
    stale = [PointRecord(id=str(uuid.uuid4()), dense=vec(i), sparse_indices=[7], sparse_values=[1.0], payload={"document_id": i, "title": t, "text": x})
             for i, (t, x) in enumerate([("Licences", "renew licence online"), ("Pensions", "retirement benefits")])]
    old.replace_documents("c", {0: stale[:1], 1: stale[1:]})
    version = (root / "c" / "CURRENT").read_text()
    (root / "c" / version / SPARSE_FILE).write_text("qdrant-bm25:english:snowball:k1.5:avg256")
    old.close()

    store = EdgeQdrantStore(root)
    hits = search(store, "c", "retirement", 0)

    assert hits[0].payload["text"] == "retirement benefits"
    assert hits[0].sparse_score > 0  # the stale terms held none of the question's
    a, b = np.asarray(vec(1)), np.asarray(vec(0))
    assert hits[0].dense_score == pytest.approx(float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)), abs=1e-4)  # its dense vector kept
    now = (root / "c" / "CURRENT").read_text()
    assert now != version
    assert (root / "c" / now / SPARSE_FILE).read_text() == MODEL
    assert store.count("c") == 2
    store.close()


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


def test_edge_and_the_server_store_rank_the_same_points_alike(tmp_path):
    """Moving from the embedded store to a server (QDRANT_URL) keeps the rankings: same BM25 terms, IDF, fusion and scores."""
    edge, server = EdgeQdrantStore(tmp_path / "q"), ServerQdrantStore(":memory:")
    texts = ["renew licence online", "licence fees and renewal", "retirement benefits", "lost licence", "vision test for licence renewal",
             "apply for benefits online", "replace a lost card", "renew online today"]
    rng = np.random.default_rng(0)
    for store in (edge, server):
        rng = np.random.default_rng(0)
        for name, rows in (("a", texts[:5]), ("b", texts[5:])):
            store.ensure_collection(name, DIM)
            store.replace_documents(name, {i: [PointRecord(id=str(uuid.uuid5(uuid.NAMESPACE_OID, t)), dense=rng.normal(size=DIM).tolist(),
                                                           sparse_indices=bm25_vector(t)[0], sparse_values=bm25_vector(t)[1], payload={"document_id": i, "text": t})]
                                           for i, t in enumerate(rows)})
    idx, val = bm25_vector("renew my licence online benefits", query=True)
    query = rng.normal(size=DIM).tolist()
    ranked = [[(h.payload["text"], round(h.score, 5), round(h.dense_score, 4), round(h.sparse_score, 4))
               for h in store.search_many(["a", "b"], query, idx, val, limit=6, weights=[0.6, 0.4])] for store in (edge, server)]
    assert ranked[0] == ranked[1]
    for name, found in edge.evidence(["a", "b"], query, idx, val).items():
        assert found == pytest.approx(server.evidence(["a", "b"], query, idx, val)[name], abs=1e-5)
    edge.close()


def test_keyword_scores_over_several_collections_use_the_idf_of_all_of_them(store):
    """A word common in one collection and rare in another weighs the same in both: as if one collection held every chunk."""
    names = [f"contract_{uuid.uuid4().hex[:8]}" for _ in range(3)]
    licences = ["renew licence online", "licence fees", "lost licence", "licence test"]
    pensions = ["retirement benefits", "pension licence rules", "benefits online"]
    for name, texts in ((names[0], licences), (names[1], pensions), (names[2], licences + pensions)):
        store.ensure_collection(name, DIM)
        store.replace_documents(name, {1: [point(1, i, t, i) for i, t in enumerate(texts)]})
    idx, val = bm25_vector("licence benefits online", query=True)

    split = store.search_many(names[:2], vec(0), idx, val, limit=7, method="sparse")
    whole = store.search(names[2], vec(0), idx, val, limit=7, method="sparse")

    assert sorted(round(h.sparse_score, 4) for h in split) == sorted(round(h.sparse_score, 4) for h in whole)
    for name in names:
        store.drop(name)
