"""The default backend: an extractive, cited answer, no language model needed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
from django.conf import settings

from experts.ml.extractive import Answer, ChunkSentenceCache, Passage, extractive_answer
from sbcommon.encoders import get_encoder

from .base import GenerationRequest, stream_by_words

_caches: dict[str, ChunkSentenceCache] = {}
_caches_lock = threading.Lock()


def chunk_cache(encoder_name: str) -> ChunkSentenceCache:
    """The process's cache of chunk sentence vectors for one encoder (``EXTRACTIVE_CHUNK_CACHE`` chunks)."""
    cache = _caches.get(encoder_name)
    if cache is None:
        with _caches_lock:
            cache = _caches.setdefault(encoder_name, ChunkSentenceCache(int(getattr(settings, "EXTRACTIVE_CHUNK_CACHE", 5000))))
    return cache


def chunk_cache_counts() -> tuple[int, int]:
    """(hits, misses) of this process's chunk sentence caches (for /metrics and the serving bench)."""
    caches = list(_caches.values())
    return sum(c.hits for c in caches), sum(c.misses for c in caches)


def clear_chunk_caches() -> None:
    """Forget every cached chunk (tests; re-indexing changes chunk texts, which the cache key notices anyway)."""
    with _caches_lock:
        _caches.clear()


def scorer_spec(config: Any = settings) -> str | dict[str, Any] | None:
    """The sentence scorer the settings name (``sentence_scorer.load_scorer``): ``EXTRACTIVE_SENTENCE_WEIGHTS``
    (linear weights) where set, else ``EXTRACTIVE_SENTENCE_SCORER`` (the shipped network by default)."""
    weights = getattr(config, "EXTRACTIVE_SENTENCE_WEIGHTS", None)
    return weights if weights is not None else getattr(config, "EXTRACTIVE_SENTENCE_SCORER", "default")


class ExtractiveGenerator:
    """Assembles the answer from the passages' best sentences (see ``experts.ml.extractive``)."""

    name = "extractive"

    def generate(self, request: GenerationRequest) -> Answer:
        encoder = get_encoder()
        question = request.search_question or request.question
        embed = encoder.encode
        if request.question_vector is not None:
            given = np.asarray(request.question_vector, dtype=np.float32)[None, :]

            def embed(texts: list[str], batch_size: int = 64) -> np.ndarray:
                if not texts or texts[0] != question:
                    return encoder.encode(texts)
                return given if len(texts) == 1 else np.vstack([given, encoder.encode(texts[1:])])

        return extractive_answer(
            question, request.passages, embed, min_score=settings.EXTRACTIVE_MIN_SCORE,
            max_sentences=settings.EXTRACTIVE_MAX_SENTENCES, scorer=scorer_spec(settings),
            cache=chunk_cache(encoder.name),
        )

    def stream(self, request: GenerationRequest) -> Iterator[str | Answer]:
        return stream_by_words(self.generate(request))


def lead_sentence(request: GenerationRequest) -> tuple[int, str] | None:
    """(place among ``request.passages``, 1-based; the sentence) that the extractive answer would quote first.

    None when it would answer "not found" (weak passages, no sentence). The language model's prompt
    names it (``GENERATION_LEAD_SENTENCE``).
    """
    answer = ExtractiveGenerator().generate(request)
    quoted = (answer.selection or {}).get("quoted") or []
    if not answer.grounded or not quoted:
        return None
    return int(quoted[0]["passage"]), str(quoted[0]["text"])


def with_lead(request: GenerationRequest) -> list[Passage]:
    """``request.passages`` with the lead sentence (``lead_sentence``) set on the passage it comes from."""
    lead = lead_sentence(request) if request.passages else None
    if lead is None:
        return list(request.passages)
    return [replace(p, lead=lead[1] if i == lead[0] else "") for i, p in enumerate(request.passages, start=1)]
