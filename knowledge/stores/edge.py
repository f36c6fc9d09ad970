"""Qdrant Edge (``qdrant-edge-py``): Qdrant's own engine in-process, one shard folder per collection under ``QDRANT_PATH``.

The web server, the Celery worker and beat are separate processes, and a shard with a write-ahead
log is opened by one process at a time. So each collection is a series of immutable shard
versions (``<root>/<name>/<version>/``) without a WAL: a writer builds the next version (a copy of
the active one's other documents plus its change, or a fresh one for a rebuild), flushes it,
closes it and atomically repoints ``<root>/<name>/CURRENT`` (``os.replace``); a write is
acknowledged only then, so a crash leaves an inactive folder and loses nothing acknowledged.
Readers load the version the pointer names (any number of processes may) and load again when it
moves; the next writer removes old versions (a reader that still has one loaded keeps its open
files). Writers to one collection queue on a lock file.

A collection written by the numpy store this replaced (an ``ACTIVE`` pointer to a snapshot with a
``hybrid/`` folder) is converted on first use: its vectors and payloads are kept, its BM25 terms are
recomputed with Qdrant's ``Bm25`` from each chunk's title and text.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe

from sbcommon import faults

from ..ml.sparse import MODEL as SPARSE_MODEL
from ..ml.sparse import bm25_vector, sparse_text
from .base import Hit, PointRecord, StoreUnavailable
from .contract import DENSE, SPARSE, evidence, probed_idf, search_many

logger = logging.getLogger(__name__)

POINTER = "CURRENT"
LEGACY_POINTER = "ACTIVE"
TURNSTILE = ".backup.lock"  # held by a backup (``frozen``); every writer passes through it first
SPARSE_FILE = "sparse_model"  # in each version: the ``knowledge.ml.sparse.MODEL`` its sparse vectors were made with
BATCH = 256


def _config(dimension: int) -> qe.EdgeConfig:
    # One search thread: searches are small, and threads fighting over shared cores cost more than they save (MEASURED.md).
    return qe.EdgeConfig(vectors={DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)},
                         sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}, wal_enabled=False, max_search_threads=1)


def _points(points: list[PointRecord]) -> list[qe.Point]:
    return [qe.Point(id=p.id, vector={DENSE: list(p.dense), SPARSE: qe.SparseVector(list(p.sparse_indices), list(p.sparse_values))},
                     payload=p.payload) for p in points]


def _legacy_points(snapshot: Path) -> tuple[int, list[PointRecord]]:
    """The chunks of a numpy-store snapshot (``hybrid/``), their BM25 terms recomputed from each payload's title and text."""
    folder = snapshot / "hybrid"
    meta = json.loads((folder / "meta.json").read_text())
    stored = json.loads((folder / "points.json").read_text(encoding="utf-8"))
    dense = np.load(folder / "dense.npy", allow_pickle=False).reshape(len(stored["ids"]), meta["dimension"])
    out = []
    for pid, vector, payload in zip(stored["ids"], dense, stored["payloads"], strict=True):
        indices, values = bm25_vector(sparse_text(payload.get('title', ''), payload.get('text', '')))
        out.append(PointRecord(id=pid, dense=vector.tolist(), sparse_indices=indices, sparse_values=values, payload=payload))
    return int(meta["dimension"]), out


def _settle(version: Path) -> None:
    """Load a written version once before it is activated: Qdrant Edge's first load rewrites files of the folder
    (``edge_config.json`` gains its defaults, each ``tracker_journal.dat`` is folded into its tracker), so a version
    is left as no reader will change it, and two processes loading a new version at once, or a backup copying it,
    never meet it half-rewritten. Its files are then synced to disk."""
    qe.EdgeShard.load(str(version)).close()
    for path in sorted(version.rglob("*"), reverse=True):  # files before the folders that hold them
        _fsync(path)
    _fsync(version.parent)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _upsert(shard: qe.EdgeShard, points: list[PointRecord]) -> None:
    for start in range(0, len(points), BATCH):
        shard.update(qe.UpdateOperation.upsert_points(_points(points[start : start + BATCH])))


class EdgeQdrantStore:
    """Qdrant Edge shards, one immutable version per write behind a pointer file (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str], lock_timeout: float = 120.0, pointer_ttl_s: float = 0.0):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock_timeout = lock_timeout
        # Searches trust the pointer they read for this long (0: read it every time): a serving process
        # searches several collections per request. Writes in this process update it at once; another
        # process's re-index shows within the TTL.
        self.pointer_ttl_s = max(0.0, float(pointer_ttl_s))
        self._pointers: dict[str, tuple[float, str | None]] = {}
        self._readers: dict[str, tuple[str, qe.EdgeShard]] = {}
        self._mutex = threading.RLock()

    # -- versions --------------------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"invalid collection name {name!r}")
        return self.root / name

    def _active(self, name: str, pointer: str = POINTER) -> str | None:
        try:
            return (self._dir(name) / pointer).read_text().strip() or None
        except FileNotFoundError:
            return None

    def _set_active(self, name: str, version: str | None) -> None:
        pointer = self._dir(name) / POINTER
        self._pointers.pop(name, None)
        if version is None:
            pointer.unlink(missing_ok=True)
            return
        tmp = pointer.with_suffix(f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "w") as handle:
            handle.write(version)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, pointer)
        _fsync(pointer.parent)

    @contextlib.contextmanager
    def _flock(self, path: Path, held_by: str) -> Iterator[None]:
        """Hold an exclusive lock on the file ``path``, waiting at most ``lock_timeout`` (``held_by`` says who holds it)."""
        with open(path, "a+") as handle:
            deadline = time.monotonic() + self.lock_timeout
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StoreUnavailable(f"{held_by} for over {self.lock_timeout:.0f} s") from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _writer_lock(self, name: str) -> Iterator[None]:
        directory = self._dir(name)
        directory.mkdir(parents=True, exist_ok=True)
        # Through the turnstile first: a backup holding it (``frozen``) lets the writes in progress finish and starts
        # no new one, where writers taking the collection's lock back to back would keep a backup waiting for ever.
        with self._flock(self.root / TURNSTILE, "a backup has been copying the collections"):
            pass
        with self._flock(directory / ".writer.lock", f"collection {name} is locked: another process has been writing it"):
            yield

    def _sparse_model(self, name: str, version: str) -> str:
        """The sparse model a version's vectors were made with ("" for a version written before versions said it)."""
        try:
            return (self._dir(name) / version / SPARSE_FILE).read_text().strip()
        except FileNotFoundError:
            return ""

    def _write(self, name: str, points: list[PointRecord] | None = None, dimension: int | None = None, keep_except: list[int] | None = None,
               legacy_only: bool = False, resparse_only: bool = False, payloads: dict[str, dict[str, Any]] | None = None) -> None:
        """Write a new version holding the active one's points but those of documents ``keep_except`` (None: none of them,
        a fresh collection) plus ``points``, then activate it. ``legacy_only``: only if the collection is still the numpy
        store's; ``resparse_only``: only if its sparse vectors are another model's. Points copied from a version of another
        sparse model get theirs made again from their title and text, so a version never mixes two models' terms.
        ``payloads``: keys added to the copied points' payloads, by point id."""
        with self._mutex, self._writer_lock(name):
            active = self._active(name)
            if legacy_only and active is not None:
                return  # another process converted it while this one waited for the lock
            if resparse_only and (active is None or self._sparse_model(name, active) == SPARSE_MODEL):
                return  # as above
            legacy = None if active or (dimension is not None and keep_except is None) else self._legacy(name)
            if dimension is None:
                if active is None and legacy is None:
                    raise ValueError(f"collection {name} does not exist")
                dimension = legacy[0] if legacy else int(json.loads((self._dir(name) / active / "edge_config.json").read_text())["vectors"][DENSE]["size"])
            version = f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"
            target = self._dir(name) / version
            shard = qe.EdgeShard.create(str(target), _config(dimension))
            try:
                if keep_except is not None and active:
                    self._copy(self._dir(name) / active, shard, keep_except, resparse=self._sparse_model(name, active) != SPARSE_MODEL, payloads=payloads)
                elif keep_except is not None and legacy:
                    _upsert(shard, [PointRecord(p.id, p.dense, p.sparse_indices, p.sparse_values, {**p.payload, **(payloads or {}).get(p.id, {})})
                                    for p in legacy[1] if p.payload.get("document_id") not in keep_except])
                _upsert(shard, points or [])
                # Fault hook: a writer that stalls (or dies) after writing, before the switch.
                faults.inject("vector_store_write", StoreUnavailable, expert=name.removeprefix("expert_"))
                shard.flush()
            except BaseException:
                shard.close()
                shutil.rmtree(target, ignore_errors=True)
                raise
            shard.close()
            (target / SPARSE_FILE).write_text(SPARSE_MODEL)
            _settle(target)
            self._set_active(name, version)
            self._collect_garbage(name)  # inside the writer lock: no other writer is copying a version now

    @staticmethod
    def _copy(source: Path, shard: qe.EdgeShard, skip_documents: list[int], resparse: bool = False, payloads: dict[str, dict[str, Any]] | None = None) -> None:
        """The points of the version at ``source`` but ``skip_documents``'s, into ``shard``; ``resparse``: their sparse
        vectors made again (``knowledge.ml.sparse``) from their title and text; ``payloads``: keys added to theirs, by id."""
        old = qe.EdgeShard.load(str(source))
        try:
            skip = qe.Filter(must_not=[qe.FieldCondition(key="document_id", match=qe.MatchAny(any=skip_documents))]) if skip_documents else None
            offset = None
            while True:
                records, offset = old.scroll(qe.ScrollRequest(offset=offset, limit=BATCH, filter=skip, with_payload=True, with_vector=True))
                if records and resparse:
                    records = [qe.Point(id=r.id, vector={DENSE: r.vector[DENSE], SPARSE: qe.SparseVector(*bm25_vector(sparse_text((r.payload or {}).get('title', ''), (r.payload or {}).get('text', ''))))},
                                        payload=r.payload) for r in records]
                if records:
                    shard.update(qe.UpdateOperation.upsert_points([qe.Point(id=r.id, vector=r.vector, payload={**(r.payload or {}), **payloads.get(str(r.id), {})} if payloads else r.payload)
                                                                   for r in records]))
                if offset is None:
                    return
        finally:
            old.close()

    def _legacy(self, name: str) -> tuple[int, list[PointRecord]] | None:
        """The numpy store's collection ``name`` as (dimension, points), if there is one (its pointer goes once read)."""
        snapshot = self._active(name, LEGACY_POINTER)
        if snapshot is None:
            return None
        try:
            found = _legacy_points(self._dir(name) / snapshot)
        except (OSError, ValueError, KeyError) as exc:
            logger.warning("knowledge.store.legacy_unreadable", extra={"collection": name, "error": str(exc)[:200]})
            (self._dir(name) / LEGACY_POINTER).unlink(missing_ok=True)  # empty until its expert is rebuilt (Knowledge page)
            return None
        logger.warning("knowledge.store.legacy_converted", extra={"collection": name, "points": len(found[1])})
        return found

    def _collect_garbage(self, name: str) -> None:
        """Remove every version but the active one (and what the numpy store left)."""
        directory = self._dir(name)
        active = self._active(name)
        (directory / LEGACY_POINTER).unlink(missing_ok=True)
        for child in directory.iterdir() if directory.exists() else []:
            if child.is_dir() and child.name != active:
                shutil.rmtree(child, ignore_errors=True)
            elif child.name.startswith(f"{POINTER}.tmp-"):  # a writer killed between writing the pointer and renaming it
                child.unlink(missing_ok=True)

    def _shard(self, name: str) -> qe.EdgeShard | None:
        """The active version, loaded once per version (the pointer is re-read after ``pointer_ttl_s``; 0: every call).

        Raises:
            StoreUnavailable: the store's folder is gone, or the version cannot be loaded.
        """
        self._dir(name)  # a malformed name is the caller's bug (ValueError), not an outage
        for attempt in range(5):
            now = time.monotonic()
            known = self._pointers.get(name)
            if attempt == 0 and known is not None and now - known[0] < self.pointer_ttl_s:
                active = known[1]
            else:
                if not self.root.is_dir():
                    raise StoreUnavailable(f"the embedded vector store's folder {self.root} is missing")
                if self._active(name) is None and self._active(name, LEGACY_POINTER) is not None:
                    with contextlib.suppress(ValueError):  # unreadable: logged, and empty from now on
                        self._write(name, keep_except=[], legacy_only=True)
                active = self._active(name)
                self._pointers[name] = (now, active)
            with self._mutex:
                cached = self._readers.get(name)
                if cached and cached[0] == active:
                    return cached[1]
                if active is None:
                    self._readers.pop(name, None)
                    return None
            if self._sparse_model(name, active) != SPARSE_MODEL:  # an older release's terms: made again once, then loaded
                with contextlib.suppress(FileNotFoundError):  # collected meanwhile by another writer: read the pointer again
                    self._write(name, keep_except=[], resparse_only=True)
                self._pointers.pop(name, None)
                continue
            try:
                shard = qe.EdgeShard.load(str(self._dir(name) / active))
            except Exception as exc:  # qdrant_edge raises a bare Exception for every failure
                self._pointers.pop(name, None)
                if self._active(name) == active:
                    raise StoreUnavailable(f"collection {name}'s version {active} cannot be loaded ({str(exc)[:160]})") from exc
                continue  # a writer replaced the version and collected this one meanwhile: read the pointer again
            with self._mutex:
                self._readers[name] = (active, shard)
            return shard
        raise StoreUnavailable(f"collection {name} changed five times while it was being loaded")

    def _candidates(self, name: str, q: np.ndarray, sparse_indices: list[int], sparse_values: list[float], kinds: list[str],
                    limit: int) -> dict[str, list[tuple[str, float]]]:
        shard = self._shard(name)
        if shard is None:
            return {}
        vectors = {DENSE: q.tolist(), SPARSE: qe.SparseVector(list(sparse_indices), list(sparse_values))}
        found = shard.query_batch(qe.QueryBatchRequest([qe.QueryRequest(limit=limit, query=qe.Query.Nearest(vectors[k], using=k)) for k in kinds]))
        return {kind: [(str(p.id), float(p.score)) for p in points] for kind, points in zip(kinds, found, strict=True)}

    def _records(self, name: str, ids: list[str]) -> dict[str, tuple[dict[str, Any], list[float]]]:
        shard = self._shard(name)
        found = shard.retrieve(ids, with_payload=True, with_vector=[DENSE]) if shard is not None else []
        return {str(r.id): (r.payload or {}, r.vector[DENSE]) for r in found}

    def _term_idf(self, name: str, terms: list[int]) -> tuple[int, list[float]]:
        shard = self._shard(name)
        if shard is None or not terms:
            return 0, [0.0] * len(terms)
        probes = [qe.QueryRequest(limit=1, query=qe.Query.Nearest(qe.SparseVector([t], [1.0]), using=SPARSE), with_vector=[SPARSE]) for t in terms]
        found = shard.query_batch(qe.QueryBatchRequest(probes))
        return (int(shard.info().points_count),
                [probed_idf(t, p[0].score, p[0].vector[SPARSE].indices, p[0].vector[SPARSE].values) if p else 0.0 for t, p in zip(terms, found, strict=True)])

    def close(self) -> None:
        with self._mutex:
            for _, shard in self._readers.values():
                shard.close()
            self._readers.clear()

    # -- the VectorStore interface ---------------------------------------------------------------
    def ensure_collection(self, name: str, dimension: int) -> None:
        if self._active(name) is None and self._active(name, LEGACY_POINTER) is None:
            self._write(name, dimension=dimension)

    def replace_documents(self, name: str, documents: dict[int, list[PointRecord]]) -> None:
        self._write(name, [p for batch in documents.values() for p in batch], keep_except=list(documents))

    def delete_document(self, name: str, document_id: int) -> None:
        if self._active(name) is None and self._active(name, LEGACY_POINTER) is None:
            return
        self._write(name, keep_except=[document_id])

    def set_payloads(self, name: str, payloads: dict[str, dict[str, Any]]) -> None:
        if payloads and (self._active(name) is not None or self._active(name, LEGACY_POINTER) is not None):
            self._write(name, keep_except=[], payloads=payloads)  # a copy of every point, these payloads added

    def rebuild(self, name: str, dimension: int, points: list[PointRecord]) -> None:
        self._write(name, points, dimension=dimension)

    def search(self, name: str, dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5, method: str = "hybrid") -> list[Hit]:
        return search_many(self, [name], dense, sparse_indices, sparse_values, limit, method, None)

    def search_many(self, names: list[str], dense: list[float], sparse_indices: list[int], sparse_values: list[float], limit: int = 5,
                    method: str = "hybrid", weights: list[float] | None = None) -> list[Hit]:
        return search_many(self, names, dense, sparse_indices, sparse_values, limit, method, weights)

    def evidence(self, names: list[str], dense: Any, sparse_indices: list[int], sparse_values: list[float]) -> dict[str, tuple[float, float] | None]:
        return evidence(self, names, dense, sparse_indices, sparse_values)

    def count(self, name: str) -> int:
        shard = self._shard(name)
        return 0 if shard is None else int(shard.count(qe.CountRequest(exact=True)))

    def drop(self, name: str) -> None:
        with self._mutex, self._writer_lock(name):
            cached = self._readers.pop(name, None)
            if cached:
                cached[1].close()
            self._set_active(name, None)
            self._collect_garbage(name)

    # -- backup and restore (operations.backup) ---------------------------------------------------
    def names(self, convert: bool = True) -> list[str]:
        """The collections that have an active version (``convert``: converting a numpy-store one first)."""
        out = []
        for child in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if not child.is_dir() or child.name.startswith("."):
                continue
            if convert and self._active(child.name) is None and self._active(child.name, LEGACY_POINTER) is not None:
                with contextlib.suppress(ValueError):  # unreadable: logged, and empty from now on
                    self._write(child.name, keep_except=[], legacy_only=True)
            if self._active(child.name):
                out.append(child.name)
        return out

    @contextlib.contextmanager
    def frozen(self) -> Iterator[dict[str, Path]]:
        """Every collection's active version folder, while no writer can change any collection.

        The turnstile and every writer lock are held until the block ends (writers wait, up to ``lock_timeout``),
        and an active version is never changed again (``_settle``), so its folder can be copied as it is.
        """
        self.names()  # converts numpy-store collections while writers may still go through
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._flock(self.root / TURNSTILE, "another backup has been copying the collections"))
            versions = {}
            for name in self.names(convert=False):
                stack.enter_context(self._flock(self._dir(name) / ".writer.lock", f"collection {name} is locked: another process has been writing it"))
                active = self._active(name)
                if active:
                    versions[name] = self._dir(name) / active
            yield versions

    def install(self, name: str, version: Path, copy: Any = shutil.copytree) -> None:
        """Make a copy of the version folder ``version`` (another store's, e.g. a backup's) the active version of the empty collection ``name``.

        Raises:
            ValueError: the collection already has an active version, or the copy does not load.
        """
        with self._mutex, self._writer_lock(name):
            if self._active(name) or self._active(name, LEGACY_POINTER):
                raise ValueError(f"collection {name} already exists")
            target = self._dir(name) / f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"
            copy(version, target)
            try:
                _settle(target)
            except Exception as exc:  # qdrant_edge raises a bare Exception for every failure
                shutil.rmtree(target, ignore_errors=True)
                raise ValueError(f"collection {name}'s copy does not load ({str(exc)[:160]})") from exc
            self._set_active(name, target.name)
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
