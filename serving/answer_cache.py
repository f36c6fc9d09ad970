"""The answer cache: the language model's answer served again to the same question asked of the same expert.

Safe by construction: an entry is found only by everything the answer was written from, namely
the question (letter case and spacing aside), the expert, its serving version and adapter, the
system prompt and citation format, the passages the model was shown, the answer's length limit
and the caller's allowed experts. A hit is the answer the model would write again: only greedy
answers are cached (a request with a temperature never is), only a conversation's first question
(a follow-up's answer reads its conversation), and a changed document, version or prompt is
another key (old entries age out). Only the model's answers are kept: the extractive answer costs
less than a lookup saves. The cache lives in each web process, least recently used entries go
first, and ``ANSWER_CACHE_SIZE`` 0 (the default) turns it off.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from typing import Any

from django.conf import settings

from experts.generation import GenerationRequest
from experts.ml.lru import Lru
from sbcommon.lazy import ProcessSingleton


@dataclass(frozen=True)
class Cached:
    """One cached answer and the question it was written for."""

    question: str
    text: str
    citations: list[dict[str, Any]] = field(default_factory=list)


def normalise(question: str) -> str:
    """The question as the cache compares it: case folded, runs of spaces one space."""
    return " ".join(question.split()).casefold()


def cache_key(request: GenerationRequest, version: int | None, allowed: Any) -> str:
    """The key of the model's answer to ``request`` (see the module docstring); ``allowed`` None: every expert."""
    passages = [{f.name: getattr(p, f.name) for f in fields(p) if f.name != "sentence_vectors"} for p in request.passages]
    parts = {
        "expert": request.expert, "version": version, "adapter": request.adapter.name if request.adapter else "",
        "question": normalise(request.question), "searched": normalise(request.search_question),
        "prompt": request.system_prompt, "citation_format": request.citation_format, "max_tokens": request.max_tokens,
        "passages": passages, "allowed": None if allowed is None else sorted(allowed),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class AnswerCache(Lru[str, Cached]):
    """Answers by key, least recently used first out; ``size`` 0: off."""

    @property
    def enabled(self) -> bool:
        return self.size > 0

    def lookup(self, key: str) -> Cached | None:
        """The answer cached under ``key``, or None."""
        return self.get(key)

    def store(self, key: str, cached: Cached) -> None:
        if cached.text.strip():
            self.put(key, cached)


_cache = ProcessSingleton(lambda: AnswerCache(settings.ANSWER_CACHE_SIZE))


def get_cache() -> AnswerCache:
    """The process's answer cache, made on first use from ``ANSWER_CACHE_SIZE``."""
    return _cache.get()


def reset() -> None:
    """Forget the cache (tests; a settings change)."""
    _cache.reset()
