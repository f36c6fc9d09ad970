"""Qdrant stores: a server (``QDRANT_URL``) or qdrant-client's embedded local mode (a folder).

Long because both stores share one set of point and query calls and differ only in how they swap a
collection atomically: splitting them would split that shared code across modules.

Both use the same qdrant-client calls for points and queries. They differ in how a collection is
swapped atomically:

* Server: each build is a physical collection ``<name>__<stamp>`` behind the alias ``<name>``;
  replacing a document upserts the new chunks, then deletes the old ones (never a gap).
* Embedded: local mode locks its folder to one process, but the web server, the Celery worker and
  beat are separate processes. So every write produces a new *snapshot folder*
  (``<root>/<name>/<stamp>/``): the writer copies the active snapshot, applies its change, closes it
  and atomically repoints ``<root>/<name>/ACTIVE`` (``os.replace``). Readers load the active snapshot
  and load again when the pointer moves; old snapshots are removed by the next writer. Writers
  to one collection queue on a lock file. This is copy-on-write, fine for the small knowledge bases
  local mode is meant for; use a Qdrant server beyond that.

  Local mode searches by brute force in Python (~30 ms at 10k points), so searches do not go
  through it: each snapshot carries a ``hybrid/`` folder, written by the writer before the pointer
  moves, holding the same points as numpy/scipy arrays (``knowledge.ml.index``), and readers load
  that (~1 ms a search at 10k chunks, same IDF and RRF as Qdrant). Readers never open the Qdrant
  folder, so they never hold its lock; a snapshot that lost its race with the garbage collector is
  simply loaded again from the new pointer. Qdrant's files stay the storage every write starts from.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from sbcommon import faults

from ..ml.index import HybridIndex, rrf_score, search_indexes
from .base import Hit, PointRecord, StoreUnavailable

logger = logging.getLogger(__name__)

DENSE = "dense"
SPARSE = "sparse"
PREFETCH_FACTOR = 4
HYBRID_DIR = "hybrid"
METHODS = ("hybrid", "dense", "sparse")


def _inject_faults(names: list[str]) -> None:
    """Fault-injection hook (``sbcommon.faults``): the store slow or down, for everyone or for some experts' collections."""
    for name in names:
        faults.inject("vector_store", StoreUnavailable, expert=name.removeprefix("expert_"))


def _check_failures(names: list[str], weights: list[float], failures: dict[str, StoreUnavailable]) -> None:
    """A fused search survives a broken *secondary* collection (skipped, logged) but not a broken primary one.

    The primary collection (highest weight: the expert the router chose first) failing raises
    ``StoreUnavailable``, so the caller fails over to the next expert; so does every collection
    failing. A collection searched only because the search widened to other experts does not
    take the whole answer down with it.
    """
    if not failures:
        return
    weighted = [(w, n) for n, w in zip(names, weights, strict=True) if w > 0]
    primary = max(weighted, key=lambda item: item[0])[1] if weighted else None
    if primary in failures or len(failures) >= len(weighted):
        raise failures.get(primary) or next(iter(failures.values()))
    logger.warning("knowledge.store.collections_skipped", extra={"collections": sorted(failures)})


def _server_errors(method):
    """Turn a Qdrant server that cannot be reached, times out or answers 5xx into ``StoreUnavailable``.

    Callers (the chat path, readiness) then degrade or fail over instead of answering 500; a 4xx
    (our own mistake, e.g. a bad filter) stays what it is.
    """

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except UnexpectedResponse as exc:
            if exc.status_code is not None and exc.status_code < 500:
                raise
            raise StoreUnavailable(f"the Qdrant server answered {exc.status_code}") from exc
        except (ResponseHandlingException, httpx.HTTPError, ConnectionError, TimeoutError) as exc:
            raise StoreUnavailable(f"the Qdrant server cannot be reached ({exc.__class__.__name__})") from exc

    return wrapper


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"unknown search method {method!r}; choose one of {', '.join(METHODS)}")


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


def _dense_of(point: models.ScoredPoint, q: np.ndarray) -> float:
    vector = point.vector.get(DENSE) if isinstance(point.vector, dict) else None
    return float(np.dot(q, np.asarray(vector, dtype=np.float32))) if vector is not None else 0.0


def _hybrid_search(client: QdrantClient, name: str, dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int,
                   method: str = "hybrid") -> list[Hit]:
    _check_method(method)
    sparse = models.SparseVector(indices=sparse_indices, values=sparse_values)
    if method == "dense":
        result = client.query_points(name, query=dense, using=DENSE, limit=limit, with_payload=True, with_vectors=[DENSE])
    elif method == "sparse":
        if not sparse_indices:
            return []
        result = client.query_points(name, query=sparse, using=SPARSE, limit=limit, with_payload=True, with_vectors=[DENSE])
    else:
        prefetch = [models.Prefetch(query=dense, using=DENSE, limit=limit * PREFETCH_FACTOR)]
        if sparse_indices:
            prefetch.append(models.Prefetch(query=sparse, using=SPARSE, limit=limit * PREFETCH_FACTOR))
        result = client.query_points(
            name, prefetch=prefetch, query=models.FusionQuery(fusion=models.Fusion.RRF), limit=limit, with_payload=True, with_vectors=[DENSE],
        )
    q = np.asarray(dense, dtype=np.float32)
    hits = []
    for point in result.points:
        score = float(point.score)
        hits.append(Hit(
            id=str(point.id), score=score, dense_score=_dense_of(point, q), payload=dict(point.payload or {}),
            sparse_score=score if method == "sparse" else 0.0, collection=name,
        ))
    return hits


def _index_hits(index: HybridIndex, name: str, found: list) -> list[Hit]:
    return [
        Hit(id=index.ids[h.row], score=h.score, dense_score=h.dense_score, payload=dict(index.payloads[h.row]), sparse_score=h.sparse_score, collection=name)
        for h in found
    ]


class ServerQdrantStore:
    """A Qdrant server or cluster; collections live behind aliases."""

    def __init__(self, url: str, api_key: str | None = None, timeout: int = 10):
        self.client = QdrantClient(url=url, api_key=api_key, timeout=timeout)

    def _physical(self, name: str) -> str | None:
        for alias in self.client.get_aliases().aliases:
            if alias.alias_name == name:
                return alias.collection_name
        return None

    @_server_errors
    def ensure_collection(self, name: str, dimension: int) -> None:
        if self._physical(name) is None:
            physical = f"{name}__{int(time.time() * 1000)}"
            _collection_config(self.client, physical, dimension)
            self.client.update_collection_aliases(
                change_aliases_operations=[models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=physical, alias_name=name))]
            )

    @_server_errors
    def replace_documents(self, name: str, documents: dict[int, list[PointRecord]]) -> None:
        # New chunks first, then the old ones go: a reader may briefly see both, never neither.
        for document_id, points in documents.items():
            for start in range(0, len(points), 256):
                self.client.upsert(name, points=_to_points(points[start : start + 256]), wait=True)
            keep = [p.id for p in points]
            self.client.delete(name, points_selector=models.FilterSelector(filter=_doc_filter(document_id, keep)), wait=True)

    @_server_errors
    def delete_document(self, name: str, document_id: int) -> None:
        self.client.delete(name, points_selector=models.FilterSelector(filter=_doc_filter(document_id)), wait=True)

    @_server_errors
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

    @_server_errors
    def search(self, name: str, dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5, method: str = "hybrid") -> list[Hit]:
        _check_method(method)
        _inject_faults([name])
        if self._physical(name) is None:
            return []
        return _hybrid_search(self.client, name, dense, sparse_indices, sparse_values, limit, method)

    @_server_errors
    def search_many(self, names: list[str], dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5,
                    method: str = "hybrid", weights: list[float] | None = None) -> list[Hit]:
        """Each collection's dense and sparse candidates, merged into global lists by score, fused by weighted RRF.

        Dense cosines are comparable across collections; BM25 scores carry each collection's own
        IDF here (the embedded store uses IDF over all of them), close enough to rank candidates.
        """
        _check_method(method)
        weights = list(weights) if weights is not None else [1.0] * len(names)
        prefetch = limit * PREFETCH_FACTOR
        q = np.asarray(dense, dtype=np.float32)
        pools: dict[str, list[tuple[float, str, str]]] = {"dense": [], "sparse": []}
        points: dict[tuple[str, str], models.ScoredPoint] = {}
        weight_of = dict(zip(names, weights, strict=True))
        failures: dict[str, StoreUnavailable] = {}
        queries = []
        if method != "sparse":
            queries.append(("dense", dense, DENSE))
        if method != "dense" and sparse_indices:
            queries.append(("sparse", models.SparseVector(indices=sparse_indices, values=sparse_values), SPARSE))
        for name, weight in weight_of.items():
            if weight <= 0:
                continue
            try:
                found = self._candidates(name, queries, prefetch)
            except StoreUnavailable as exc:
                failures[name] = exc
                continue
            for kind, point in found:
                pools[kind].append((float(point.score), name, str(point.id)))
                points[(name, str(point.id))] = point
        _check_failures(names, weights, failures)
        fused: dict[tuple[str, str], float] = {}
        sparse_of: dict[tuple[str, str], float] = {}
        for kind, pool in pools.items():
            pool.sort(key=lambda item: -item[0])
            for position, (score, name, pid) in enumerate(pool[:prefetch]):
                fused[(name, pid)] = fused.get((name, pid), 0.0) + rrf_score(position)
                if kind == "sparse":
                    sparse_of[(name, pid)] = score
        best = sorted(((key, s * weight_of[key[0]]) for key, s in fused.items()), key=lambda item: -item[1])[:limit]
        return [
            Hit(id=pid, score=score, dense_score=_dense_of(points[(name, pid)], q), payload=dict(points[(name, pid)].payload or {}),
                sparse_score=sparse_of.get((name, pid), 0.0), collection=name)
            for (name, pid), score in best
        ]

    @_server_errors
    def _candidates(self, name: str, queries: list, prefetch: int) -> list[tuple[str, models.ScoredPoint]]:
        """One collection's dense and sparse candidates (none if it does not exist); ``StoreUnavailable`` if it cannot be reached."""
        _inject_faults([name])
        if self._physical(name) is None:
            return []
        out = []
        for kind, query, using in queries:
            result = self.client.query_points(name, query=query, using=using, limit=prefetch, with_payload=True, with_vectors=[DENSE])
            out.extend((kind, point) for point in result.points)
        return out

    @_server_errors
    def evidence(self, names: list[str], dense: list[float], sparse_indices: list[int], sparse_values: list[float]) -> dict[str, tuple[float, float] | None]:
        sparse = models.SparseVector(indices=sparse_indices, values=sparse_values)
        dense = [float(v) for v in dense]  # the caller may pass a numpy vector; the client sends JSON
        out: dict[str, tuple[float, float] | None] = {}
        for name in names:
            _inject_faults([name])
            if self._physical(name) is None:
                out[name] = None
                continue
            top = self.client.query_points(name, query=dense, using=DENSE, limit=1).points
            if not top:
                out[name] = None
                continue
            best_sparse = self.client.query_points(name, query=sparse, using=SPARSE, limit=1).points if sparse_indices else []
            out[name] = (float(top[0].score), float(best_sparse[0].score) if best_sparse else 0.0)
        return out

    @_server_errors
    def count(self, name: str) -> int:
        if self._physical(name) is None:
            return 0
        return int(self.client.count(name, exact=True).count)

    @_server_errors
    def drop(self, name: str) -> None:
        physical = self._physical(name)
        if physical is not None:
            self.client.update_collection_aliases(
                change_aliases_operations=[models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=name))]
            )
            self.client.delete_collection(physical)

    @_server_errors
    def health(self) -> None:
        self.client.get_collections()


def _unsynced_writes(client: QdrantClient, name: str) -> None:
    """Let local mode write a private snapshot without an fsync per point (it commits every point on its own).

    A snapshot is invisible until the pointer moves, and ``_write`` syncs its files before that, so
    a crash half-way leaves only an inactive folder for the garbage collector. Reaches into
    qdrant-client's internals; if they change, writes are merely slower.
    """
    try:
        connection = client._client.collections[name].storage.storage  # type: ignore[attr-defined]
        connection.execute("PRAGMA synchronous=OFF")
        connection.execute("PRAGMA journal_mode=MEMORY")
    except (AttributeError, KeyError, TypeError) as exc:  # pragma: no cover - depends on qdrant-client's internals
        logger.info("knowledge.store.unsynced_writes_unavailable", extra={"reason": str(exc)})


def _sync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file() and path.name != ".lock":
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())


def _export_index(client: QdrantClient, name: str, folder: Path) -> None:
    """Write the snapshot's points as a ``HybridIndex`` (what readers search)."""
    ids, dense, sparse_indices, sparse_values, payloads = [], [], [], [], []
    offset = None
    dimension = client.get_collection(name).config.params.vectors[DENSE].size  # type: ignore[index]
    while True:
        points, offset = client.scroll(name, limit=1024, offset=offset, with_payload=True, with_vectors=True)
        for point in points:
            vectors = point.vector if isinstance(point.vector, dict) else {}
            sparse = vectors.get(SPARSE)
            ids.append(str(point.id))
            dense.append(vectors[DENSE])
            sparse_indices.append(list(sparse.indices) if sparse is not None else [])
            sparse_values.append(list(sparse.values) if sparse is not None else [])
            payloads.append(dict(point.payload or {}))
        if offset is None:
            break
    HybridIndex.from_points(ids, dense, sparse_indices, sparse_values, payloads, dimension=dimension).save(folder)


def _load_index(snapshot: Path, name: str) -> HybridIndex:
    """The snapshot's saved index; a snapshot written before indexes were saved is read through Qdrant once."""
    if not snapshot.is_dir():
        raise FileNotFoundError(snapshot)
    try:
        return HybridIndex.load(snapshot / HYBRID_DIR)
    except FileNotFoundError:
        if not (snapshot / "collection").exists():
            raise
    folder = Path(tempfile.mkdtemp(prefix="legacy-index-"))
    client = QdrantClient(path=str(snapshot), force_disable_check_same_thread=True)
    try:
        _export_index(client, name, folder)
    finally:
        client.close()
    try:
        return HybridIndex.load(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class EmbeddedQdrantStore:
    """qdrant-client local mode with copy-on-write snapshot folders (see the module docstring)."""

    POINTER = "ACTIVE"

    def __init__(self, root: str | os.PathLike[str], lock_timeout: float = 120.0, pointer_ttl_s: float = 0.0):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock_timeout = lock_timeout
        # Searches trust the active-snapshot pointer they read for this long (0: read it every time).
        # A serving process searches several collections per request; each read is a few syscalls,
        # and under load every syscall costs a wait for the GIL. Writes in this process update it at
        # once; another process's re-index shows within the TTL.
        self.pointer_ttl_s = max(0.0, float(pointer_ttl_s))
        self._pointers: dict[str, tuple[float, str | None]] = {}
        self._readers: dict[str, tuple[str, HybridIndex]] = {}
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

    def _active_for_search(self, name: str) -> str | None:
        """``_active``, once the store's folder is seen to exist; both reused for ``pointer_ttl_s`` seconds.

        Raises:
            StoreUnavailable: the store's folder is missing (a missing pointer only means no collection).
        """
        now = time.monotonic()
        known = self._pointers.get(name)
        if known is not None and now - known[0] < self.pointer_ttl_s:
            return known[1]
        if not self.root.is_dir():
            raise StoreUnavailable(f"the embedded vector store's folder {self.root} is missing")
        active = self._active(name)
        if self.pointer_ttl_s > 0:
            self._pointers[name] = (now, active)
        return active

    def _set_active(self, name: str, snapshot: str | None) -> None:
        pointer = self._dir(name) / self.POINTER
        self._pointers.pop(name, None)
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
                        raise StoreUnavailable(f"collection {name} is locked: another process has been writing it for over {self.lock_timeout:.0f} s") from None
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
                shutil.copytree(self._dir(name) / active, target, ignore=shutil.ignore_patterns(".lock", HYBRID_DIR))
            else:
                target.mkdir(parents=True)
            client = QdrantClient(path=str(target), force_disable_check_same_thread=True)
            try:
                if not client.collection_exists(name):
                    if dimension is None:
                        raise ValueError(f"collection {name} does not exist")
                    _collection_config(client, name, dimension, payload_indexes=False)
                _unsynced_writes(client, name)
                yield client
                # Fault hook: a writer that stalls (or dies) after writing, before the switch.
                faults.inject("vector_store_write", StoreUnavailable, expert=name.removeprefix("expert_"))
                _export_index(client, name, target / HYBRID_DIR)
            except BaseException:
                client.close()
                shutil.rmtree(target, ignore_errors=True)
                raise
            client.close()
            _sync_tree(target)  # durable before it becomes visible
            self._set_active(name, snapshot)
            # Inside the writer lock: no other writer is half-way through copying a snapshot now.
            self._collect_garbage(name)

    def _index(self, name: str) -> HybridIndex | None:
        """The active snapshot's index, loaded once per snapshot (the pointer is re-read after ``pointer_ttl_s``; 0: every call).

        Raises:
            StoreUnavailable: the store's folder is gone or unreadable, or the snapshot is damaged.
        """
        self._dir(name)  # a malformed name is the caller's bug (ValueError), not an outage
        try:
            return self._load_active(name)
        except (PermissionError, OSError, ValueError, EOFError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise StoreUnavailable(f"collection {name}'s active snapshot is missing ({exc})") from exc
            raise StoreUnavailable(f"collection {name} cannot be read ({exc.__class__.__name__}: {str(exc)[:120]})") from exc

    def _load_active(self, name: str) -> HybridIndex | None:
        for attempt in range(5):
            active = self._active_for_search(name) if attempt == 0 else self._active(name)
            with self._mutex:
                cached = self._readers.get(name)
                if cached and cached[0] == active:
                    return cached[1]
            if active is None:
                with self._mutex:
                    self._readers.pop(name, None)
                return None
            try:
                index = _load_index(self._dir(name) / active, name)
            except FileNotFoundError:
                continue  # a writer replaced the snapshot and collected this one meanwhile: read the pointer again
            with self._mutex:
                self._readers[name] = (active, index)
            return index
        raise StoreUnavailable(f"collection {name} changed five times while it was being loaded")

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

    def search(self, name: str, dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5, method: str = "hybrid") -> list[Hit]:
        _check_method(method)
        _inject_faults([name])
        index = self._index(name)
        if index is None:
            return []
        return _index_hits(index, name, index.search(dense, sparse_indices, sparse_values, limit=limit, method=method, prefetch=limit * PREFETCH_FACTOR))

    def search_many(self, names: list[str], dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5,
                    method: str = "hybrid", weights: list[float] | None = None) -> list[Hit]:
        _check_method(method)
        weights = list(weights) if weights is not None else [1.0] * len(names)
        pairs, failures = [], {}
        for name, weight in zip(names, weights, strict=True):
            if weight <= 0:
                continue
            try:
                _inject_faults([name])
                index = self._index(name)
            except StoreUnavailable as exc:
                failures[name] = exc
                continue
            if index is not None:
                pairs.append((name, index, weight))
        _check_failures(names, weights, failures)
        found = search_indexes([index for _, index, _ in pairs], dense, sparse_indices, sparse_values, limit=limit, method=method,
                               weights=[w for _, _, w in pairs], prefetch=limit * PREFETCH_FACTOR)
        return [
            Hit(id=pairs[h.index][1].ids[h.row], score=h.score, dense_score=h.dense_score, payload=dict(pairs[h.index][1].payloads[h.row]),
                sparse_score=h.sparse_score, collection=pairs[h.index][0])
            for h in found
        ]

    def evidence(self, names: list[str], dense: list[float], sparse_indices: list[int], sparse_values: list[float]) -> dict[str, tuple[float, float] | None]:
        out: dict[str, tuple[float, float] | None] = {}
        for name in names:
            _inject_faults([name])
            index = self._index(name)
            out[name] = index.best_scores(dense, sparse_indices, sparse_values) if index is not None and len(index) else None
        return out

    def count(self, name: str) -> int:
        index = self._index(name)
        return 0 if index is None else len(index)

    def drop(self, name: str) -> None:
        with self._mutex, self._writer_lock(name):
            self._readers.pop(name, None)
            self._set_active(name, None)
            self._collect_garbage(name)

    def health(self) -> None:
        """Raise ``StoreUnavailable`` unless the store's folder exists and takes a write (what every index change needs)."""
        if not self.root.is_dir():
            raise StoreUnavailable(f"the embedded vector store's folder {self.root} is missing")
        probe = self.root / f".probe-{uuid.uuid4().hex}"
        try:
            probe.write_text("ok")
            probe.unlink()
        except OSError as exc:
            raise StoreUnavailable(f"the embedded vector store's folder {self.root} is not writable ({exc.__class__.__name__})") from exc
