"""Re-scoring retrieved passages by their best sentence: a bi-encoder second look, no cross-encoder.

Retrieval scores a chunk as a whole (its dense vector and its BM25 terms), so a chunk whose one
sentence answers the question can rank under a chunk that is about the topic in general. Indexing
already stores each chunk's sentence vectors (``knowledge.ml.sentences``, for the extractive
answer); this looks at them: a candidate's new score mixes its retrieval score, scaled by the
best one's, with the cosine of its best sentence to the question. Pure numpy: vectors in, scores
out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def best_sentence_scores(query: np.ndarray, sentence_vectors: Sequence[np.ndarray | None], fallback: Sequence[float]) -> np.ndarray:
    """Each candidate's highest sentence cosine with ``query`` (L2-normalised rows); ``fallback`` where it has no sentences."""
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    out = np.asarray(fallback, dtype=np.float32).copy()
    for i, block in enumerate(sentence_vectors):
        if block is not None and len(block) and np.shape(block)[-1] == q.shape[0]:
            out[i] = float(np.max(np.asarray(block, dtype=np.float32) @ q))
    return out


def rescore(query: np.ndarray, scores: Sequence[float], sentence_vectors: Sequence[np.ndarray | None], weight: float,
            fallback: Sequence[float] | None = None) -> np.ndarray:
    """Mixed scores of retrieved candidates: ``(1 - weight) * score / max(score) + weight * best sentence cosine``.

    Args:
        query: the question's vector (L2-normalised, the sentences' encoder).
        scores: the candidates' retrieval scores, best first (any positive scale: RRF, cosine).
        sentence_vectors: each candidate's sentence vectors, ``(sentences, dim)``, or None.
        weight: the sentence score's share, in [0, 1]; 0 keeps the retrieval order.
        fallback: a candidate's sentence score when it has no sentence vectors (default: its
            retrieval score scaled like the others', so it neither gains nor loses).

    Returns:
        The new scores, in the candidates' order (sort them descending to re-rank).
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError("the re-scoring weight must be between 0 and 1")
    base = np.asarray(scores, dtype=np.float32)
    if base.size == 0:
        return base
    top = float(base.max())
    scaled = base / top if top > 0 else np.zeros_like(base)
    if weight == 0.0:
        return scaled
    sentences = best_sentence_scores(query, sentence_vectors, scaled if fallback is None else fallback)
    return (1.0 - weight) * scaled + weight * sentences


def rerank(query: np.ndarray, scores: Sequence[float], sentence_vectors: Sequence[np.ndarray | None], weight: float,
           fallback: Sequence[float] | None = None) -> list[int]:
    """The candidates' indices in their re-scored order, best first (ties keep the retrieval order)."""
    mixed = rescore(query, scores, sentence_vectors, weight, fallback)
    return sorted(range(len(mixed)), key=lambda i: (-float(mixed[i]), i))
