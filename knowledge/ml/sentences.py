"""Sentence vectors kept in a chunk's payload: packed as base64 float16, one row per sentence.

The extractive generator scores each retrieved chunk's sentences against the question. Encoding
them at index time, with the chunk, means serving never encodes passage text: a fresh server
answers at full speed, and under load the encoder only sees questions. float16 halves the payload
(~1 KB of base64 per sentence for a 384-dimension model); the cosine scores move by ~1e-3.
"""

from __future__ import annotations

import base64

import numpy as np


def pack_vectors(vectors: np.ndarray) -> str:
    """``(rows, dim)`` float vectors as base64 of little-endian float16."""
    return base64.b64encode(np.ascontiguousarray(vectors, dtype="<f2").tobytes()).decode("ascii")


def unpack_vectors(packed: str, dimension: int) -> np.ndarray | None:
    """The float32 ``(rows, dimension)`` array ``pack_vectors`` wrote; None if it does not fit ``dimension``."""
    try:
        raw = base64.b64decode(packed, validate=True)
    except (ValueError, TypeError):
        return None
    if dimension <= 0 or len(raw) % (2 * dimension):
        return None
    vectors = np.frombuffer(raw, dtype="<f2").astype(np.float32).reshape(-1, dimension)
    vectors.setflags(write=False)
    return vectors
