"""Sparse term vectors for keyword search (BM25 term-frequency part; Qdrant applies the IDF).

Terms are lower-cased word tokens minus stop words, mapped to stable 31-bit indices by hashing,
so no vocabulary has to be stored or kept in sync between processes.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
STOP_WORDS = frozenset(
    """a about above after again all am an and any are as at be because been before being below between both but by
    can could did do does doing down during each few for from further had has have having he her here hers him his how
    i if in into is it its itself just me more most my no nor not now of off on once only or other our out over own
    same she should so some such than that the their them then there these they this those through to too under until
    up very was we were what when where which while who whom why will with would you your yours""".split()
)


def tokenize(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOP_WORDS and len(t) > 1]


def term_index(term: str) -> int:
    return zlib.crc32(term.encode("utf-8")) & 0x7FFFFFFF


def bm25_vector(text: str, *, k1: float = 1.2, b: float = 0.75, avg_len: float = 120.0, query: bool = False) -> tuple[list[int], list[float]]:
    """Sparse (indices, values) for ``text``.

    Documents get BM25's saturated, length-normalised term frequency; queries get 1 per distinct
    term (BM25 sums document weights over query terms; the IDF comes from the collection).
    """
    counts = Counter(term_index(t) for t in tokenize(text))
    if not counts:
        return [], []
    if query:
        indices = sorted(counts)
        return indices, [1.0] * len(indices)
    length = sum(counts.values())
    norm = k1 * (1 - b + b * length / avg_len)
    indices = sorted(counts)
    return indices, [counts[i] * (k1 + 1) / (counts[i] + norm) for i in indices]
