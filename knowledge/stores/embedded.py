"""qdrant-client's embedded local mode (a folder, ``QDRANT_PATH``), shared by separate processes through snapshots.

Local mode locks its folder to one process, but the web server, the Celery worker and beat are
separate processes. So every write produces a new *snapshot folder* (``<root>/<name>/<stamp>/``):
the writer copies the active snapshot, applies its change, closes it and atomically repoints
``<root>/<name>/ACTIVE`` (``os.replace``). Readers load the active snapshot and load again when the
pointer moves; old snapshots are removed by the next writer. Writers to one collection queue on a
lock file. This is copy-on-write, fine for the small knowledge bases local mode is meant for; use a
Qdrant server beyond that.

Local mode searches by brute force in Python (~30 ms at 10k points), so searches do not go through
it: each snapshot carries a ``hybrid/`` folder, written by the writer before the pointer moves,
holding the same points as numpy/scipy arrays (``knowledge.ml.index``), and readers load that (~1 ms
a search at 10k chunks, same IDF and RRF as Qdrant). Readers never open the Qdrant folder, so they
never hold its lock; a snapshot that lost its race with the garbage collector is simply loaded again
from the new pointer. Qdrant's files stay the storage every write starts from.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from qdrant_client import QdrantClient, models

from sbcommon import faults

from ..ml.index import HybridIndex, search_indexes
from .base import Hit, PointRecord, StoreUnavailable
from .contract import PREFETCH_FACTOR, check_failures, check_method, inject_faults
from .qdrant_schema import DENSE, SPARSE, create_collection, document_filter, to_points

logger = logging.getLogger(__name__)

HYBRID_DIR = "hybrid"


def _index_hits(index: HybridIndex, name: str, found: list) -> list[Hit]:
    return [
        Hit(id=index.ids[h.row], score=h.score, dense_score=h.dense_score, payload=dict(index.payloads[h.row]), sparse_score=h.sparse_score, collection=name)
        for h in found
    ]


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
                    create_collection(client, name, dimension, payload_indexes=False)
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
                client.delete(name, points_selector=models.FilterSelector(filter=document_filter(document_id)))
                for start in range(0, len(points), 256):
                    client.upsert(name, points=to_points(points[start : start + 256]))

    def delete_document(self, name: str, document_id: int) -> None:
        if self._active(name) is None:
            return
        with self._write(name) as client:
            client.delete(name, points_selector=models.FilterSelector(filter=document_filter(document_id)))

    def rebuild(self, name: str, dimension: int, points: list[PointRecord]) -> None:
        with self._write(name, dimension, fresh=True) as client:
            for start in range(0, len(points), 256):
                client.upsert(name, points=to_points(points[start : start + 256]))

    def search(self, name: str, dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5, method: str = "hybrid") -> list[Hit]:
        check_method(method)
        inject_faults([name])
        index = self._index(name)
        if index is None:
            return []
        return _index_hits(index, name, index.search(dense, sparse_indices, sparse_values, limit=limit, method=method, prefetch=limit * PREFETCH_FACTOR))

    def search_many(self, names: list[str], dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5,
                    method: str = "hybrid", weights: list[float] | None = None) -> list[Hit]:
        check_method(method)
        weights = list(weights) if weights is not None else [1.0] * len(names)
        pairs, failures = [], {}
        for name, weight in zip(names, weights, strict=True):
            if weight <= 0:
                continue
            try:
                inject_faults([name])
                index = self._index(name)
            except StoreUnavailable as exc:
                failures[name] = exc
                continue
            if index is not None:
                pairs.append((name, index, weight))
        check_failures(names, weights, failures)
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
            inject_faults([name])
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
