"""A backup taken while a collection is being written holds one whole version of it: every document's points or none."""

from __future__ import annotations

import threading

import qdrant_edge as qe

from knowledge.stores.base import PointRecord
from knowledge.stores.edge import EdgeQdrantStore
from operations.backup import backup
from tests.operations.conftest import use_data_folder

DIM, PER_DOCUMENT = 8, 50


def _points(doc: int) -> list[PointRecord]:
    return [PointRecord(id=f"{doc:08d}-0000-0000-0000-{i:012d}", dense=[float((doc + i + j) % 3 + 1) for j in range(DIM)],
                        sparse_indices=[i + 1], sparse_values=[1.0], payload={"document_id": doc, "text": f"{doc} {i}"}) for i in range(PER_DOCUMENT)]


def test_backups_taken_during_writes_hold_whole_documents(tmp_path, settings, transactional_db):
    use_data_folder(settings, tmp_path / "var")
    writer = EdgeQdrantStore(settings.QDRANT_PATH, lock_timeout=30)
    writer.ensure_collection("expert_w", DIM)
    acknowledged: list[int] = []
    stop = threading.Event()

    def write() -> None:
        doc = 0
        while not stop.is_set():
            writer.replace_documents("expert_w", {doc: _points(doc)})
            acknowledged.append(doc)
            doc += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        copies = []
        for n in range(3):
            while len(acknowledged) < 2 * (n + 1):  # let a write or two land between backups
                stop.wait(0.01)
            before = len(acknowledged)
            backup(tmp_path / f"b{n}")
            copies.append((before, len(acknowledged), tmp_path / f"b{n}" / "qdrant" / "expert_w"))
    finally:
        stop.set()
        thread.join(timeout=60)
    for before, after, folder in copies:
        shard = qe.EdgeShard.load(str(folder))
        try:
            points = shard.count(qe.CountRequest(exact=True))
        finally:
            shard.close()
        assert points % PER_DOCUMENT == 0, f"{points} points: a document half-written"
        assert before <= points // PER_DOCUMENT <= after + 1  # every write acknowledged before it, none after it finished
