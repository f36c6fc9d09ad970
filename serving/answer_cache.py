"""The semantic answer cache: a question close enough to one answered before gets that answer again.

Only the language model's answers are cached (the extractive answer costs less than a lookup is
worth). An entry belongs to one key: the expert, its serving version and adapter, the system
prompt, the knowledge base's last change and the API key's scope. A new version, prompt or index
is a new key, so older entries are never served again (they age out of the LRU), and one scope
never reads another's. A question hits when its vector's cosine with a cached question's is at
least ``ANSWER_CACHE_MIN_COSINE`` (chosen by ``evaluate cache``; see the setting). The cache lives
in each web process (a second worker has its own); ``ANSWER_CACHE_SIZE`` 0 turns it off.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.conf import settings

from experts.selectors import serving_cached


@dataclass(frozen=True)
class Cached:
    """One cached answer and the question it was written for."""

    question: str
    text: str
    citations: list[dict[str, Any]] = field(default_factory=list)


def knowledge_snapshot(slug: str) -> str:
    """The expert's knowledge base's last change (kept with the serving caches, cleared on its saves)."""
    from knowledge.models import KnowledgeBase

    def load() -> str:
        kb = KnowledgeBase.objects.filter(expert__slug=slug).only("updated_at").first()
        return kb.updated_at.isoformat() if kb is not None and kb.updated_at else ""

    return serving_cached(("kb-snapshot", slug), load)


def cache_key(expert: str, version: int | None, adapter: str | None, system_prompt: str, allowed: Any) -> tuple[str, ...]:
    """The key a question's answer is cached under (see the module docstring)."""
    scope = "all" if allowed is None else ",".join(sorted(allowed))
    prompt = hashlib.sha256((system_prompt or "").encode()).hexdigest()[:16]
    return (expert, str(version), adapter or "", prompt, knowledge_snapshot(expert), scope)


class AnswerCache:
    """Entries by key, each key's questions as unit vectors; least recently used keys and entries go first."""

    def __init__(self, size: int, min_cosine: float, per_key: int = 512):
        self.size, self.min_cosine, self.per_key = int(size), float(min_cosine), int(per_key)
        self._keys: OrderedDict[tuple[str, ...], tuple[list[np.ndarray], list[Cached]]] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.size > 0

    def lookup(self, key: tuple[str, ...], vector: Any) -> tuple[Cached, float] | None:
        """The cached answer whose question is nearest ``vector`` if within the threshold, with its cosine."""
        if not self.enabled or vector is None:
            return None
        v = np.asarray(vector, dtype=np.float32)
        with self._lock:
            entry = self._keys.get(key)
            if entry is None or not entry[0]:
                return None
            sims = np.stack(entry[0]) @ v
            best = int(sims.argmax())
            if float(sims[best]) < self.min_cosine:
                return None
            self._keys.move_to_end(key)
            return entry[1][best], float(sims[best])

    def store(self, key: tuple[str, ...], vector: Any, cached: Cached) -> None:
        if not self.enabled or vector is None or not cached.text.strip():
            return
        v = np.asarray(vector, dtype=np.float32)
        with self._lock:
            vectors, answers = self._keys.setdefault(key, ([], []))
            self._keys.move_to_end(key)
            vectors.append(v)
            answers.append(cached)
            self._count += 1
            if len(vectors) > self.per_key:
                del vectors[0], answers[0]
                self._count -= 1
            while self._count > self.size and self._keys:
                _, (old_vectors, _) = self._keys.popitem(last=False)
                self._count -= len(old_vectors)

    def __len__(self) -> int:
        return self._count


_cache: AnswerCache | None = None
_cache_lock = threading.Lock()


def get_cache() -> AnswerCache:
    """The process's answer cache, made on first use from ``ANSWER_CACHE_SIZE`` and ``ANSWER_CACHE_MIN_COSINE``."""
    global _cache
    if _cache is None:
        with _cache_lock:
            if _cache is None:
                _cache = AnswerCache(int(getattr(settings, "ANSWER_CACHE_SIZE", 0)), float(getattr(settings, "ANSWER_CACHE_MIN_COSINE", 1.0)))
    return _cache


def reset() -> None:
    """Forget the cache (tests; a settings change)."""
    global _cache
    with _cache_lock:
        _cache = None
