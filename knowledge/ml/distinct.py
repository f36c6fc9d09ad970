"""Words that belong to one expert's documents: evidence that a question is in scope (``routing.ml.knowledge``)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")


class DistinctWords:
    """How strongly a question's rarest words belong to one expert's documents: ``rarity x share``.

    A word's rarity is ``log(all words / its count)`` over every expert's documents; a question's
    evidence is its largest ``rarity x share`` ("what is PSLF?": rare, all in Student Aid's documents).
    Only words outside ``known`` (the encoder's whole-word vocabulary) count: everyday words can be
    rare in a small document set by chance, while jargon the encoder does not know is what it misses.
    ``exclude`` scores as if one expert did not exist (held-out experts on validation).
    """

    def __init__(self, counts: Sequence[Counter[str]], known: frozenset[str] | set[str] = frozenset()):
        self.counts = list(counts)
        self.known = frozenset(known)
        self.total: Counter[str] = Counter()
        for c in self.counts:
            self.total.update(c)
        self.size = sum(self.total.values())
        self.sizes = [sum(c.values()) for c in self.counts]

    @classmethod
    def from_texts(cls, texts_by_expert: Iterable[Iterable[str]], known: frozenset[str] | set[str] = frozenset()) -> DistinctWords:
        return cls([Counter(w for text in texts for w in _WORD.findall(text.lower()) if len(w) > 1) for texts in texts_by_expert], known)

    def _claims(self, text: str, exclude: int | None) -> Iterator[tuple[str, int, float]]:
        """(word, expert, ``rarity x that expert's share``) for each of the question's words in some expert's documents."""
        drop = self.counts[exclude] if exclude is not None else None
        size = self.size - (self.sizes[exclude] if exclude is not None else 0)
        if size <= 0:
            return
        for word in sorted(set(_WORD.findall((text or "").lower())) - self.known):
            total = self.total.get(word, 0) - (drop.get(word, 0) if drop is not None else 0)
            if total <= 0:
                continue
            rarity = math.log(size / total)
            for i, c in enumerate(self.counts):
                n = c.get(word, 0)
                if n and i != exclude:
                    yield word, i, rarity * n / total

    def strongest(self, text: str, exclude: int | None = None) -> tuple[str, int, float] | None:
        """The question's strongest claim as (word, expert, ``rarity x share``), what a trace shows; None when no word counts."""
        return max(self._claims(text, exclude), key=lambda claim: claim[2], default=None)

    def score(self, text: str, exclude: int | None = None) -> float:
        """The question's evidence (0 when none of its words occurs in the documents): its strongest claim's value."""
        claim = self.strongest(text, exclude)
        return claim[2] if claim is not None else 0.0

    def scores(self, texts: Sequence[str], exclude: Sequence[int] | None = None) -> np.ndarray:
        return np.array([self.score(t, None if exclude is None else int(exclude[i])) for i, t in enumerate(texts)], dtype=np.float64)
