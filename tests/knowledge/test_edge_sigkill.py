"""A writer killed with SIGKILL mid-upsert loses no acknowledged point, and the collection it leaves loads and searches.

A child process writes one document's points at a time through the product's store
(``EdgeQdrantStore.replace_documents``) and prints the document's number once the call has returned;
the parent kills it at a moment spread over a write's duration, then opens the collection in a new store.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from knowledge.stores.edge import POINTER, EdgeQdrantStore

ROOT = Path(__file__).resolve().parents[2]
DIM = 16
PER_DOCUMENT = 400  # points a write adds; the writes copy the collection, so each takes longer than the last

CHILD = f"""
import sys
from knowledge.stores.base import PointRecord
from knowledge.stores.edge import EdgeQdrantStore

root, start = sys.argv[1], int(sys.argv[2])
store = EdgeQdrantStore(root)
store.ensure_collection("expert_k", {DIM})
print("ready", flush=True)
for doc in range(start, start + 1000):
    points = [PointRecord(id=f"{{doc:08d}}-0000-0000-0000-{{i:012d}}", dense=[float((i * 7 + doc + j) % 5 + 1) for j in range({DIM})],
                          sparse_indices=[doc % 50 + 1, i % 30 + 100], sparse_values=[1.0, 0.5], payload={{"document_id": doc, "text": f"doc {{doc}} {{i}}"}})
              for i in range({PER_DOCUMENT})]
    store.replace_documents("expert_k", {{doc: points}})
    print("ack", doc, flush=True)
"""


def _ids(doc: int) -> list[str]:
    return [f"{doc:08d}-0000-0000-0000-{i:012d}" for i in range(PER_DOCUMENT)]


def _write_until_killed(root: Path, start: int, acks_before_kill: int, delay: float) -> tuple[list[int], int]:
    """Run the writer, kill it ``delay`` seconds after its ``acks_before_kill``-th acknowledgement; (acknowledged documents, its last document)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT)])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(start)], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    acked: list[int] = []
    try:
        assert child.stdout.readline().strip() == "ready"
        while len(acked) < acks_before_kill:
            line = child.stdout.readline()
            assert line.startswith("ack "), f"the writer stopped: {line!r}"
            acked.append(int(line.split()[1]))
        time.sleep(delay)
    finally:
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate(timeout=30)
    acked += [int(line.split()[1]) for line in rest.splitlines() if line.startswith("ack ")]
    assert child.returncode == -signal.SIGKILL
    return acked, start + len(acked)  # the document it was writing when killed (maybe written, never acknowledged)


def test_a_writer_killed_mid_upsert_loses_no_acknowledged_point(tmp_path):
    root = tmp_path / "qdrant"
    rng = random.Random(57)
    acknowledged: list[int] = []
    start = 0
    for round_ in range(6):
        # Kill at a moment spread over a write (a few hundred ms here): before, during the copy, at the switch, after.
        acked, in_flight = _write_until_killed(root, start, acks_before_kill=1, delay=rng.uniform(0.0, 0.8))
        acknowledged += acked
        store = EdgeQdrantStore(root, lock_timeout=5)  # a new process's view: nothing cached
        try:
            present = set(store._records("expert_k", [pid for doc in [*acknowledged, in_flight] for pid in _ids(doc)]))
            missing = [doc for doc in acknowledged if not set(_ids(doc)) <= present]
            assert not missing, f"round {round_}: acknowledged documents {missing} lost"
            written_unacked = set(_ids(in_flight)) <= present
            assert store.count("expert_k") == PER_DOCUMENT * (len(acknowledged) + written_unacked)
            hits = store.search("expert_k", [1.0] * DIM, [acknowledged[-1] % 50 + 1], [1.0], limit=3)
            assert len(hits) == 3
        finally:
            store.close()
        if written_unacked:  # killed after the switch, before it said so: the next round must not reuse its ids
            acknowledged.append(in_flight)
        start = in_flight + 1
    # The next writer takes the lock the killed one held and removes what it left (unfinished versions, a stray pointer file).
    store = EdgeQdrantStore(root, lock_timeout=5)
    store.delete_document("expert_k", acknowledged[0])
    folder = root / "expert_k"
    assert [p.name for p in folder.iterdir() if p.is_dir()] == [(folder / POINTER).read_text()]
    assert not [p.name for p in folder.iterdir() if p.name.startswith(f"{POINTER}.tmp-")]
    assert store.count("expert_k") == PER_DOCUMENT * (len(acknowledged) - 1)
    store.close()


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, hash(p.read_bytes())) for p in folder.rglob("*") if p.is_file()}


def test_an_active_version_is_not_changed_by_the_readers_that_load_it(tmp_path):
    """Qdrant Edge's first load of a shard rewrites some of its files: the writer does that load before the switch,
    so readers in several processes, and a backup copying the folder, never meet a version being rewritten."""
    store = EdgeQdrantStore(tmp_path / "qdrant")
    store.ensure_collection("expert_k", DIM)
    store.replace_documents("expert_k", {1: []})
    version = tmp_path / "qdrant" / "expert_k" / (tmp_path / "qdrant" / "expert_k" / POINTER).read_text()
    before = _files(version)
    reader = EdgeQdrantStore(tmp_path / "qdrant")
    assert reader.count("expert_k") == 0
    reader.close()
    assert _files(version) == before
