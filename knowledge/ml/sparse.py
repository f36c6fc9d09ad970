"""Sparse term vectors for keyword search: Qdrant's own BM25 (``qdrant_edge.Bm25``: English stop words, hashed term
ids), so Qdrant Edge and a Qdrant server index and query the same terms. The store applies the IDF (``Modifier.Idf``)."""

from __future__ import annotations

from functools import lru_cache

from qdrant_edge import Bm25, Bm25Config, DisabledStemmer

# BM25's term-frequency saturation, expected chunk length in tokens and no stemming: chosen on doc2dial's validation
# questions replayed through the product (``evaluate retrieval --split val``), against Qdrant's English stemmer at
# k 1.5 / length 256 and without it at 1.5 / 256: nDCG@5 flat 0.715 / 0.713 / 0.714, gold expert 0.756 / 0.747 / 0.746,
# routed top-2 0.719 / 0.708 / 0.714 (docs/EVALUATIONS.md, "Tuned constants").
K = 1.2
AVG_LEN = 120.0
# What a collection's sparse vectors were made with: a store finding another (an older release's) makes them again
# from each chunk's title and text (``knowledge.stores.edge``). Change it whenever the settings above change.
MODEL = "qdrant-bm25:english:no-stemmer:k1.2:avg120"


@lru_cache(maxsize=1)
def _model() -> Bm25:
    return Bm25(Bm25Config(k=K, avg_len=AVG_LEN, language="english", stemmer=DisabledStemmer()))


def bm25_vector(text: str, *, query: bool = False) -> tuple[list[int], list[float]]:
    """Sparse (indices, values) for ``text``: a document's saturated, length-normalised term frequencies, or a query's 1 per distinct term."""
    vector = _model().embed_query(text) if query else _model().embed_document(text)
    return list(vector.indices), list(vector.values)


def sparse_text(title: str, chunk: str) -> str:
    """What a chunk's sparse vector is made from: its title (document and section) and its text."""
    return f"{title} {chunk}"
