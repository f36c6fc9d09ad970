"""Qdrant stores: a server (``QDRANT_URL``) or qdrant-client's embedded local mode (a folder).

Both use the same qdrant-client calls for points and queries. They differ in how a collection is
swapped atomically:

* Server: each build is a physical collection ``<name>__<stamp>`` behind the alias ``<name>``;
  replacing a document upserts the new chunks, then deletes the old ones (never a gap).
* Embedded: local mode locks its folder to one process, but the web server, the Celery worker and
  beat are separate processes. So every write produces a new *snapshot folder*
  (``<root>/<name>/<stamp>/``): the writer copies the active snapshot, applies its change, closes it
  and atomically repoints ``<root>/<name>/ACTIVE`` (``os.replace``). Readers keep the active snapshot
  open and reopen when the pointer moves; old snapshots are removed once nobody holds them. Writers
  to one collection queue on a lock file. This is copy-on-write, fine for the small knowledge bases
  local mode is meant for (it searches by brute force); use a Qdrant server beyond that.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from qdrant_client import QdrantClient, models

from .base import Hit, PointRecord

logger = logging.getLogger(__name__)

DENSE = "dense"
SPARSE = "sparse"
PREFETCH_FACTOR = 4


def _collection_config(client: QdrantClient, name: str, dimension: int, payload_indexes: bool = True) -> None:
    client.create_collection(
        name,
        vectors_config={DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)},
        sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
    )
    if payload_indexes:  # local mode has no payload indexes (it filters by scanning)
        for field_name, schema in (("document_id", models.PayloadSchemaType.INTEGER), ("expert", models.PayloadSchemaType.KEYWORD)):
            client.create_payload_index(name, field_name, field_schema=schema)


def _to_points(points: list[PointRecord]) -> list[models.PointStruct]:
    return [
        models.PointStruct(
            id=p.id,
            vector={DENSE: p.dense, SPARSE: models.SparseVector(indices=p.sparse_indices, values=p.sparse_values)},
            payload=p.payload,
        )
        for p in points
    ]


def _doc_filter(document_id: int, exclude_ids: list[str] | None = None) -> models.Filter:
    must_not: list[models.Condition] = [models.HasIdCondition(has_id=exclude_ids)] if exclude_ids else []
    return models.Filter(
        must=[models.FieldCondition(key="document_id", match=models.MatchValue(value=document_id))], must_not=must_not
    )


def _hybrid_search(client: QdrantClient, name: str, dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int) -> list[Hit]:
    prefetch = [models.Prefetch(query=dense, using=DENSE, limit=limit * PREFETCH_FACTOR)]
    if sparse_indices:
        prefetch.append(
            models.Prefetch(
                query=models.SparseVector(indices=sparse_indices, values=sparse_values), using=SPARSE, limit=limit * PREFETCH_FACTOR
            )
        )
    result = client.query_points(
        name,
        prefetch=prefetch,
        query=models.FusionQuery(fusion=models.Fusion.RRF),
        limit=limit,
        with_payload=True,
        with_vectors=[DENSE],
    )
    q = np.asarray(dense, dtype=np.float32)
    hits = []
    for point in result.points:
        vector = point.vector.get(DENSE) if isinstance(point.vector, dict) else None
        dense_score = float(np.dot(q, np.asarray(vector, dtype=np.float32))) if vector is not None else 0.0
        hits.append(Hit(id=str(point.id), score=float(point.score), dense_score=dense_score, payload=dict(point.payload or {})))
    return hits


class ServerQdrantStore:
    """A Qdrant server or cluster; collections live behind aliases."""

    def __init__(self, url: str, api_key: str | None = None, timeout: int = 10):
        self.client = QdrantClient(url=url, api_key=api_key, timeout=timeout)

    def _physical(self, name: str) -> str | None:
        for alias in self.client.get_aliases().aliases:
            if alias.alias_name == name:
                return alias.collection_name
        return None

    def ensure_collection(self, name: str, dimension: int) -> None:
        if self._physical(name) is None:
            physical = f"{name}__{int(time.time() * 1000)}"
            _collection_config(self.client, physical, dimension)
            self.client.update_collection_aliases(
                change_aliases_operations=[models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=physical, alias_name=name))]
            )

    def replace_documents(self, name: str, documents: dict[int, list[PointRecord]]) -> None:
        # New chunks first, then the old ones go: a reader may briefly see both, never neither.
        for document_id, points in documents.items():
            for start in range(0, len(points), 256):
                self.client.upsert(name, points=_to_points(points[start : start + 256]), wait=True)
            keep = [p.id for p in points]
            self.client.delete(name, points_selector=models.FilterSelector(filter=_doc_filter(document_id, keep)), wait=True)

    def delete_document(self, name: str, document_id: int) -> None:
        self.client.delete(name, points_selector=models.FilterSelector(filter=_doc_filter(document_id)), wait=True)

    def rebuild(self, name: str, dimension: int, points: list[PointRecord]) -> None:
        old = self._physical(name)
        physical = f"{name}__{int(time.time() * 1000)}"
        _collection_config(self.client, physical, dimension)
        for start in range(0, len(points), 256):
            self.client.upsert(physical, points=_to_points(points[start : start + 256]), wait=True)
        ops: list = []
        if old is not None:
            ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=name)))
        ops.append(models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=physical, alias_name=name)))
        self.client.update_collection_aliases(change_aliases_operations=ops)
        if old is not None:
            self.client.delete_collection(old)

    def search(self, name: str, dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5) -> list[Hit]:
        if self._physical(name) is None:
            return []
        return _hybrid_search(self.client, name, dense, sparse_indices, sparse_values, limit)

    def count(self, name: str) -> int:
        if self._physical(name) is None:
            return 0
        return int(self.client.count(name, exact=True).count)

    def drop(self, name: str) -> None:
        physical = self._physical(name)
        if physical is not None:
            self.client.update_collection_aliases(
                change_aliases_operations=[models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=name))]
            )
            self.client.delete_collection(physical)

    def health(self) -> None:
        self.client.get_collections()


class EmbeddedQdrantStore:
    """qdrant-client local mode with copy-on-write snapshot folders (see the module docstring)."""

    POINTER = "ACTIVE"

    def __init__(self, root: str | os.PathLike[str], lock_timeout: float = 120.0):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock_timeout = lock_timeout
        self._readers: dict[str, tuple[str, QdrantClient]] = {}
        self._mutex = threading.RLock()

    # -- snapshot bookkeeping ---------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"invalid collection name {name!r}")
        return self.root / name

    def _active(self, name: str) -> str | None:
        try:
            return (self._dir(name) / self.POINTER).read_text().strip() or None
        except FileNotFoundError:
            return None

    def _set_active(self, name: str, snapshot: str | None) -> None:
        pointer = self._dir(name) / self.POINTER
        if snapshot is None:
            pointer.unlink(missing_ok=True)
            return
        tmp = pointer.with_suffix(f".tmp-{uuid.uuid4().hex}")
        tmp.write_text(snapshot)
        os.replace(tmp, pointer)

    @contextlib.contextmanager
    def _writer_lock(self, name: str) -> Iterator[None]:
        directory = self._dir(name)
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / ".writer.lock", "a+") as handle:
            deadline = time.monotonic() + self.lock_timeout
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"collection {name} is being written by another process") from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _write(self, name: str, dimension: int | None = None, fresh: bool = False) -> Iterator[QdrantClient]:
        """Open a new snapshot (a copy of the active one unless ``fresh``), yield it, then activate it."""
        with self._mutex, self._writer_lock(name):
            active = self._active(name)
            snapshot = f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"
            target = self._dir(name) / snapshot
            if active and not fresh:
                shutil.copytree(self._dir(name) / active, target, ignore=shutil.ignore_patterns(".lock"))
            else:
                target.mkdir(parents=True)
            client = QdrantClient(path=str(target), force_disable_check_same_thread=True)
            try:
                if not client.collection_exists(name):
                    if dimension is None:
                        raise ValueError(f"collection {name} does not exist")
                    _collection_config(client, name, dimension, payload_indexes=False)
                yield client
            except BaseException:
                client.close()
                shutil.rmtree(target, ignore_errors=True)
                raise
            client.close()
            self._set_active(name, snapshot)
        self._collect_garbage(name)

    def _reader(self, name: str) -> QdrantClient | None:
        with self._mutex:
            active = self._active(name)
            cached = self._readers.get(name)
            if cached and cached[0] == active:
                return cached[1]
            if cached:
                cached[1].close()
                del self._readers[name]
            if active is None:
                return None
            client = QdrantClient(path=str(self._dir(name) / active), force_disable_check_same_thread=True)
            self._readers[name] = (active, client)
        self._collect_garbage(name)
        return client

    def _collect_garbage(self, name: str) -> None:
        """Remove snapshots that are neither active nor open in any process."""
        import portalocker

        directory = self._dir(name)
        if not directory.exists():
            return
        active = self._active(name)
        for child in directory.iterdir():
            if not child.is_dir() or child.name == active:
                continue
            lock_path = child / ".lock"
            if not lock_path.exists():
                shutil.rmtree(child, ignore_errors=True)
                continue
            with open(lock_path, "r+") as handle:
                try:
                    portalocker.lock(handle, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING)
                except portalocker.exceptions.LockException:
                    continue  # another process still reads it
                shutil.rmtree(child, ignore_errors=True)

    def close(self) -> None:
        with self._mutex:
            for _, client in self._readers.values():
                client.close()
            self._readers.clear()

    # -- the VectorStore interface ---------------------------------------------------------------
    def ensure_collection(self, name: str, dimension: int) -> None:
        if self._active(name) is None:
            with self._write(name, dimension):
                pass

    def replace_documents(self, name: str, documents: dict[int, list[PointRecord]]) -> None:
        with self._write(name) as client:
            for document_id, points in documents.items():
                client.delete(name, points_selector=models.FilterSelector(filter=_doc_filter(document_id)))
                for start in range(0, len(points), 256):
                    client.upsert(name, points=_to_points(points[start : start + 256]))

    def delete_document(self, name: str, document_id: int) -> None:
        if self._active(name) is None:
            return
        with self._write(name) as client:
            client.delete(name, points_selector=models.FilterSelector(filter=_doc_filter(document_id)))

    def rebuild(self, name: str, dimension: int, points: list[PointRecord]) -> None:
        with self._write(name, dimension, fresh=True) as client:
            for start in range(0, len(points), 256):
                client.upsert(name, points=_to_points(points[start : start + 256]))

    def search(self, name: str, dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5) -> list[Hit]:
        client = self._reader(name)
        if client is None:
            return []
        with self._mutex:
            return _hybrid_search(client, name, dense, sparse_indices, sparse_values, limit)

    def count(self, name: str) -> int:
        client = self._reader(name)
        if client is None:
            return 0
        with self._mutex:
            return int(client.count(name, exact=True).count)

    def drop(self, name: str) -> None:
        with self._mutex, self._writer_lock(name):
            cached = self._readers.pop(name, None)
            if cached:
                cached[1].close()
            self._set_active(name, None)
        self._collect_garbage(name)

    def health(self) -> None:
        probe = self.root / f".probe-{uuid.uuid4().hex}"
        probe.write_text("ok")
        probe.unlink()
