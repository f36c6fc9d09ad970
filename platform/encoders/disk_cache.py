"""A persistent cache of vectors on disk (``EMBEDDING_DISK_CACHE``): a rebuild or reload embeds only new text.

Re-indexing a collection, moving documents between experts, or loading a dataset again (an evaluation's
throw-away workspace, ``make test-slow``) meets the same chunks and sentences again; with MiniLM on two
CPU cores each costs ~60 ms to embed and ~0.02 ms to read back. The cache is one SQLite file per embedding
space (``space.embedding_space``: the model and the backend when its vectors differ), keyed by the text's
SHA-256, so a change of model never reads another model's vectors. It only ever adds rows: delete the
folder to empty it. Several processes may share it (SQLite's write-ahead log; a write that finds the file
busy is skipped, the vectors are still returned).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
from pathlib import Path

import numpy as np

from .base import Encoder

LOOKUP_ROWS = 500  # keys per SELECT: under SQLite's default limit of bound parameters
# Only calls of more texts than this read and fill the cache: indexing, rebuilds and embedding jobs. Serving's calls
# (a question, a conversation's few turns) pass straight through, so no user's words are kept on disk, even hashed.
BULK_MIN_TEXTS = 16


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class DiskCachedEncoder:
    """``inner`` with a vector cache on disk at ``folder``/<space>.sqlite3 for bulk calls; only texts it has not seen are encoded.

    Everything else (``encode_later``, the micro-batcher's counters, ``close``) is ``inner``'s.
    """

    def __init__(self, inner: Encoder, folder: str | Path, space: str):
        self.inner, self.name, self.dimension = inner, inner.name, inner.dimension
        folder = Path(folder).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{re.sub(r'[^A-Za-z0-9._+-]+', '_', space)}.sqlite3"
        self._local = threading.local()
        self.disk_hits = self.disk_misses = 0
        with self._db() as db:
            db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID")

    def _db(self) -> sqlite3.Connection:
        """This thread's connection (a connection must not cross threads)."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=5)
            db.execute("PRAGMA journal_mode=WAL")
            self._local.db = db
        return db

    def __getattr__(self, attribute: str):
        if attribute == "inner":  # not set yet (a copy being built): no delegation loop
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        if len(texts) <= BULK_MIN_TEXTS:
            return self.inner.encode(texts, batch_size=batch_size)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        keys = [_key(t) for t in texts]
        found = self._lookup(keys)
        missing = [i for i, k in enumerate(keys) if k not in found]
        for i, k in enumerate(keys):
            if k in found:
                out[i] = found[k]
        self.disk_hits += len(texts) - len(missing)
        self.disk_misses += len(missing)
        if missing:
            first: dict[bytes, str] = {}  # each distinct text once, in order
            for i in missing:
                first.setdefault(keys[i], texts[i])
            vectors = np.asarray(self.inner.encode(list(first.values()), batch_size=batch_size), dtype=np.float32)
            row = dict(zip(first, vectors, strict=True))
            for i in missing:
                out[i] = row[keys[i]]
            self._store(row)
        return out

    def _lookup(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        db, found = self._db(), {}
        distinct = list(dict.fromkeys(keys))
        for start in range(0, len(distinct), LOOKUP_ROWS):
            part = distinct[start : start + LOOKUP_ROWS]
            rows = db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(part))})", part).fetchall()
            found.update((k, np.frombuffer(v, dtype=np.float32)) for k, v in rows if len(v) == 4 * self.dimension)
        return found

    def _store(self, rows: dict[bytes, np.ndarray]) -> None:
        db = self._db()
        try:
            with db:
                db.executemany("INSERT OR IGNORE INTO vectors (key, vector) VALUES (?, ?)",
                               [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in rows.items()])
        except sqlite3.OperationalError:  # busy past the timeout: another process is writing; the vectors were still made
            pass

    def close(self, *args, **kwargs) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
        close = getattr(self.inner, "close", None)
        if close is not None:
            close(*args, **kwargs)
