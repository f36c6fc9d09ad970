"""Sparse term vectors for keyword search: Qdrant's own BM25 (``qdrant_edge.Bm25``: English stop words and stemming,
hashed term ids), so Qdrant Edge and a Qdrant server index and query the same terms. The store applies the IDF
(``Modifier.Idf``)."""

from __future__ import annotations

from functools import lru_cache

from qdrant_edge import Bm25, Bm25Config

# BM25's term-frequency saturation and expected chunk length in tokens, chosen by document nDCG@5 on doc2dial's
# validation questions (docs/EVALUATIONS.md, "Tuned constants").
K = 1.5
AVG_LEN = 256.0


@lru_cache(maxsize=1)
def _model() -> Bm25:
    return Bm25(Bm25Config(k=K, avg_len=AVG_LEN, language="english"))


def bm25_vector(text: str, *, query: bool = False) -> tuple[list[int], list[float]]:
    """Sparse (indices, values) for ``text``: a document's saturated, length-normalised term frequencies, or a query's 1 per distinct term."""
    vector = _model().embed_query(text) if query else _model().embed_document(text)
    return list(vector.indices), list(vector.values)
