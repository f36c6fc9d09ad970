"""The default backend: an extractive, cited answer, no language model needed."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from encoders import get_encoder
from encoders.model_files import DEFAULT_MODEL, resolve_model_path
from experts.ml.extractive import (
    ANSWER_WORDS,
    MAX_PASSAGES,
    READER_SHORTLIST,
    Answer,
    ChunkSentenceCache,
    RankedSentence,
    extractive_answer,
    rank_sentences,
)

from .base import GenerationRequest, stream_by_words

logger = logging.getLogger(__name__)
_caches: dict[str, ChunkSentenceCache] = {}
_caches_lock = threading.Lock()


def chunk_cache(encoder_name: str) -> ChunkSentenceCache:
    """The process's cache of chunk sentence vectors for one encoder (``extractive.CHUNK_CACHE_SIZE`` chunks)."""
    cache = _caches.get(encoder_name)
    if cache is None:
        with _caches_lock:
            cache = _caches.setdefault(encoder_name, ChunkSentenceCache())
    return cache


def chunk_cache_counts() -> tuple[int, int]:
    """(hits, misses) of this process's chunk sentence caches (for /metrics and the serving bench)."""
    caches = list(_caches.values())
    return sum(c.hits for c in caches), sum(c.misses for c in caches)


def scorer_spec(config: Any = settings) -> str:
    """The sentence scorer the settings name (``sentence_scorer.load_scorer``): ``EXTRACTIVE_SENTENCE_SCORER``,
    the shipped network (``"default"``) or the path of one fitted on your own data."""
    return str(config.EXTRACTIVE_SENTENCE_SCORER)


def reader_dir() -> Path:
    """Where ``manage.py train_reader`` writes the reader and the extractive answer reads it."""
    return Path(settings.VAR_DIR) / "models" / "reader"


@functools.lru_cache(maxsize=1)
def sentence_reader() -> Callable[[str, list[str]], np.ndarray] | None:
    """The reader's ``score`` (``experts.ml.reader``, int8), loaded once a process; None (the extractive answer quotes
    the sentence scorer's choice alone) while ``reader_dir()`` holds none, or one that does not beat the scorer on
    validation with ``READER_SHORTLIST`` sentences."""
    from experts.ml.reader import SentenceReader, wins_on_validation

    try:
        reader = SentenceReader.load(reader_dir(), resolve_model_path(DEFAULT_MODEL))
    except (OSError, ValueError) as exc:
        logger.info("extractive.reader.absent", extra={"folder": str(reader_dir()), "error": str(exc)[:200]})
        return None
    if not wins_on_validation(reader.report, READER_SHORTLIST):
        logger.warning("extractive.reader.loses_on_validation", extra={"folder": str(reader_dir()), "shortlist": READER_SHORTLIST})
        return None
    return reader.score


def _embedder(request: GenerationRequest, encoder: Any) -> Callable[[list[str]], np.ndarray]:
    """The encoder's ``encode``, with the question's vector taken from ``request.question_vector`` where routing computed it."""
    question = request.search_question or request.question
    if request.question_vector is None:
        return encoder.encode
    given = np.asarray(request.question_vector, dtype=np.float32)[None, :]

    def embed(texts: list[str], batch_size: int = 64) -> np.ndarray:
        if not texts or texts[0] != question:
            return encoder.encode(texts)
        return given if len(texts) == 1 else np.vstack([given, encoder.encode(texts[1:])])

    return embed


class ExtractiveGenerator:
    """Assembles the answer from the passages' best sentences (see ``experts.ml.extractive``), at most ``max_tokens`` words."""

    name = "extractive"

    def generate(self, request: GenerationRequest) -> Answer:
        encoder = get_encoder()
        limit = request.max_tokens
        answer = extractive_answer(
            request.search_question or request.question, request.passages, _embedder(request, encoder), min_score=settings.EXTRACTIVE_MIN_SCORE,
            max_sentences=settings.EXTRACTIVE_MAX_SENTENCES, max_words=min(ANSWER_WORDS, limit or ANSWER_WORDS), max_passages=MAX_PASSAGES, scorer=scorer_spec(settings),
            cache=chunk_cache(encoder.name), reader=sentence_reader(),
        )
        if limit and limit < ANSWER_WORDS and (answer.selection or {}).get("cut"):
            answer.finish_reason = "length"  # the request's max_tokens cut a sentence short, as a model's answer cut at its limit says
        return answer

    def stream(self, request: GenerationRequest) -> Iterator[str | Answer]:
        return stream_by_words(self.generate(request))


def first_choices(request: GenerationRequest, count: int, max_passages: int = MAX_PASSAGES) -> list[RankedSentence]:
    """The ``count`` sentences the extractive answer rates best for ``request``, best first (``extractive.rank_sentences``
    over its first ``max_passages`` passages, whole): none when it would answer "not found" (weak passages, no sentence).

    The language model's prompt names the first (``prompting.LEAD_SENTENCE``) and, with select decoding, keeps
    all of them in the passages it cuts: they are the shortlist the model judges (``selection.plan_selection``).
    """
    top = [p for p in request.passages[:max_passages] if p.text.strip()]
    if count < 1 or not top or max(p.score for p in top) < settings.EXTRACTIVE_MIN_SCORE:
        return []
    encoder = get_encoder()
    ranking = rank_sentences(request.search_question or request.question, list(request.passages), _embedder(request, encoder),
                             max_passages=max_passages, cache=chunk_cache(encoder.name), scorer=scorer_spec(settings))
    return ranking.sentences[:count] if ranking is not None else []
