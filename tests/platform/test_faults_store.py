"""The vector store unreachable: every backend raises StoreUnavailable, and /readyz names the store with 503."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from knowledge.stores import PointRecord, StoreUnavailable, get_store
from knowledge.stores.edge import EdgeQdrantStore
from knowledge.stores.qdrant_server import ServerQdrantStore
from sbcommon import faults

DIM = 8


def _points(marker: str, n: int = 3) -> list[PointRecord]:
    return [
        PointRecord(id=f"00000000-0000-0000-0000-{i:012d}", dense=[1.0 if j == i % DIM else 0.0 for j in range(DIM)],
                    sparse_indices=[i + 1], sparse_values=[1.0], payload={"text": f"{marker} {i}", "document_id": i, "expert": marker})
        for i in range(n)
    ]


@pytest.fixture
def embedded(tmp_path) -> EdgeQdrantStore:
    store = EdgeQdrantStore(tmp_path / "qdrant", lock_timeout=0.3)
    store.rebuild("expert_a", DIM, _points("alpha"))
    return store


def _search(store, name: str = "expert_a"):
    return store.search(name, [1.0] + [0.0] * (DIM - 1), [1], [1.0], limit=2)


def test_an_embedded_store_whose_folder_is_gone_raises_store_unavailable(embedded):
    assert _search(embedded)  # healthy first
    embedded.close()
    shutil.rmtree(embedded.root)
    with pytest.raises(StoreUnavailable, match="missing"):
        _search(embedded)
    with pytest.raises(StoreUnavailable, match="missing"):
        embedded.search_many(["expert_a"], [1.0] + [0.0] * (DIM - 1), [1], [1.0])
    with pytest.raises(StoreUnavailable):
        embedded.health()


def test_an_embedded_store_whose_active_snapshot_vanished_raises_store_unavailable(embedded):
    embedded.close()
    active = embedded._active("expert_a")
    shutil.rmtree(embedded.root / "expert_a" / active)
    with pytest.raises(StoreUnavailable):
        _search(embedded)


def test_a_collection_locked_by_another_writer_raises_store_unavailable_not_a_timeout(embedded):
    held, release = threading.Event(), threading.Event()

    def writer():
        with embedded._writer_lock("expert_a"):
            held.set()
            release.wait(5)

    other = EdgeQdrantStore(embedded.root, lock_timeout=0.3)  # the lock is per file, like another process
    thread = threading.Thread(target=writer)
    thread.start()
    held.wait(5)
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            other.delete_document("expert_a", 1)
    finally:
        release.set()
        thread.join()


def test_a_qdrant_server_that_refuses_connections_raises_store_unavailable():
    store = ServerQdrantStore("http://127.0.0.1:9", timeout=1)  # the discard port: nothing listens
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="cannot be reached"):
        store.search("expert_a", [0.0] * DIM, [], [])
    with pytest.raises(StoreUnavailable):
        store.health()
    with pytest.raises(StoreUnavailable):
        store.search_many(["expert_a", "expert_b"], [0.0] * DIM, [], [])
    assert time.monotonic() - started < 10


def test_the_fault_hook_takes_the_store_down_for_one_expert_then_lets_it_recover(embedded, tmp_path, monkeypatch):
    embedded.rebuild("expert_b", DIM, _points("beta"))
    path = tmp_path / "faults.json"
    monkeypatch.setenv(faults.ENV_VAR, str(path))
    faults.write(path, {"vector_store": {"mode": "down", "experts": ["a"], "until": time.time() + 60}})
    with pytest.raises(StoreUnavailable, match="fault injected"):
        _search(embedded)
    assert _search(embedded, "expert_b")  # other experts' collections still answer
    faults.write(path, {"vector_store": {"mode": "down", "until": time.time() - 1}})  # over
    assert _search(embedded)


@pytest.fixture
def only_store_checks(monkeypatch):
    """Readiness without the embedding-model check (it imports torch; tests/platform/test_health.py covers it)."""
    from switchboard import health

    monkeypatch.setitem(health.CHECKS, "embedding_model", lambda: None)


@pytest.mark.django_db
def test_readyz_answers_503_naming_the_vector_store_when_its_folder_is_gone(client, settings, tmp_path, only_store_checks):
    settings.QDRANT_URL = ""
    settings.QDRANT_PATH = str(tmp_path / "gone")
    get_store.cache_clear()
    try:
        store = get_store()
        shutil.rmtree(store.root)
        response = client.get("/readyz")
    finally:
        get_store.cache_clear()
    assert response.status_code == 503
    body = response.json()
    assert "vector_store" in body["failing"]
    assert "StoreUnavailable" in body["checks"]["vector_store"]
    assert body["checks"]["database"] == "ok"


@pytest.mark.django_db
def test_readyz_answers_503_naming_a_qdrant_server_that_is_down(client, settings, only_store_checks):
    settings.QDRANT_URL = "http://127.0.0.1:9"
    get_store.cache_clear()
    try:
        response = client.get("/readyz")
    finally:
        get_store.cache_clear()
    assert response.status_code == 503
    assert "vector_store" in response.json()["failing"]


def test_a_fused_search_skips_a_broken_secondary_collection_but_not_a_broken_primary(embedded, tmp_path, monkeypatch):
    embedded.rebuild("expert_b", DIM, _points("beta"))
    path = tmp_path / "faults.json"
    monkeypatch.setenv(faults.ENV_VAR, str(path))
    faults.write(path, {"vector_store": {"mode": "down", "experts": ["b"]}})
    query = ([1.0] + [0.0] * (DIM - 1), [1], [1.0])
    hits = embedded.search_many(["expert_a", "expert_b"], *query, weights=[0.8, 0.2])  # b only widened to: skipped
    assert hits
    assert {h.collection for h in hits} == {"expert_a"}
    with pytest.raises(StoreUnavailable):
        embedded.search_many(["expert_a", "expert_b"], *query, weights=[0.3, 0.7])  # b is the router's first choice
    with pytest.raises(StoreUnavailable):
        embedded.search_many(["expert_b"], *query)


def test_searches_trust_the_active_pointer_for_its_ttl_and_own_writes_at_once(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("knowledge.stores.edge.time.monotonic", lambda: clock[0])
    serving = EdgeQdrantStore(tmp_path / "qdrant", pointer_ttl_s=1.0)
    serving.rebuild("expert_a", DIM, _points("alpha"))
    assert _search(serving)[0].payload["expert"] == "alpha"
    EdgeQdrantStore(serving.root).rebuild("expert_a", DIM, _points("beta"))  # another process re-indexes
    assert _search(serving)[0].payload["expert"] == "alpha"  # within the TTL: the snapshot it had
    clock[0] += 1.5
    assert _search(serving)[0].payload["expert"] == "beta"  # read again after the TTL
    serving.rebuild("expert_a", DIM, _points("gamma"))  # its own write: seen at once
    assert _search(serving)[0].payload["expert"] == "gamma"
