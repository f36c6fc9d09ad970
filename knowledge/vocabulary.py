"""The words of experts' documents, built once per change of their documents.

``vocabulary`` is what a misspelt question is corrected against (``knowledge.search.correct_spelling``);
``distinct_words`` tells experts apart by the words only one of them uses (routing's jargon evidence).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.db.models import Count, Max

from encoders import tokenizer_words
from experts.models import Expert
from experts.selectors import experts_by_slug, serving_cached

from .ml.distinct import DistinctWords
from .ml.spelling import Vocabulary
from .models import Document

_vocabularies: dict[tuple[Any, ...], Vocabulary] = {}
_vocabularies_lock = threading.Lock()
VOCABULARY_CACHE = 64


def _vocabulary_key(expert: Expert) -> tuple[Any, ...]:
    """What an expert's vocabulary depends on: its documents' count and latest change (read once per SERVING_CACHE_TTL_S)."""
    def load() -> tuple[Any, ...]:
        stats = Document.objects.filter(expert_id=expert.pk).aggregate(n=Count("id"), last=Max("updated_at"))
        return (expert.pk, stats["n"], stats["last"].isoformat() if stats["last"] else "")

    return serving_cached(("vocabulary-key", expert.pk), load)


def _built_once(cache: dict[tuple[Any, ...], Any], keys: tuple[Any, ...], build: Callable[[], Any]) -> Any:
    """``cache[keys]``, built by ``build()`` the first time (keys: ``_vocabulary_key``s); the oldest of ``VOCABULARY_CACHE`` entries goes first."""
    with _vocabularies_lock:
        found = cache.get(keys)
    if found is not None:
        return found
    built = build()
    with _vocabularies_lock:
        if len(cache) >= VOCABULARY_CACHE:
            cache.pop(next(iter(cache)))
        cache[keys] = built
    return built


def _document_texts(expert_ids: list[int]) -> Iterable[str]:
    """The title and text of each document of the experts ``expert_ids``, read in batches."""
    rows = Document.objects.filter(expert_id__in=expert_ids).values_list("title", "text").iterator(chunk_size=200)
    return (f"{title}\n{text}" for title, text in rows)


def vocabulary(experts: list[Expert]) -> Vocabulary:
    """The words of the experts' documents (titles and texts) with their counts, built once per change of their documents."""
    keys = tuple(sorted(_vocabulary_key(e) for e in experts))
    return _built_once(_vocabularies, keys, lambda: Vocabulary.from_texts(_document_texts([e.pk for e in experts])))


_distinct: dict[tuple[Any, ...], DistinctWords] = {}


def distinct_words(slugs: list[str]) -> DistinctWords:
    """``knowledge.ml.distinct.DistinctWords`` over the documents of the experts ``slugs``, by position
    (an expert that does not exist counts as one without documents); built once per change of their documents."""
    rows = experts_by_slug(slugs)
    keys = tuple(_vocabulary_key(rows[s]) if s in rows else (s,) for s in slugs)
    return _built_once(_distinct, keys, lambda: DistinctWords.from_texts(
        (_document_texts([rows[s].pk]) if s in rows else [] for s in slugs), tokenizer_words(settings.EMBEDDING_MODEL)))
