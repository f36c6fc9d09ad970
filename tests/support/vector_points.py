"""Points for the vector-store tests (not a test module): a unit dense vector per axis of ``DIM`` and a point record
of one chunk's text, built the same way in the test process and in the processes a test starts."""

from __future__ import annotations

import uuid

import numpy as np

from knowledge.ml.sparse import bm25_vector
from knowledge.stores import PointRecord

DIM = 8


def vec(i: int) -> list[float]:
    v = np.zeros(DIM, dtype=np.float32)
    v[i % DIM] = 1.0
    v[(i + 1) % DIM] = 0.3
    return (v / np.linalg.norm(v)).tolist()


def point(doc: int, pos: int, text: str, axis: int) -> PointRecord:
    idx, val = bm25_vector(text)
    return PointRecord(id=str(uuid.uuid5(uuid.NAMESPACE_OID, f"{doc}:{pos}:{text}")), dense=vec(axis), sparse_indices=idx, sparse_values=val,
                       payload={"document_id": doc, "text": text, "position": pos})
