"""A grounded answer assembled from retrieved passages, with numbered citations, and no LLM.

Sentences are scored by their similarity to the question (embedding cosine) plus a little for
lexical overlap; the best few, kept in the order they appear in their passage, form the answer.
When the best passage scores below ``min_score`` the answer says so instead of guessing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])|\n{2,}|\n(?=\s*(?:[-*•]|\d+\.)\s)")
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of to in on for and or is are be can i my me do does how what when where who why with it this that you your".split())

NOT_FOUND = "I could not find this in the knowledge base."


@dataclass
class Passage:
    """A retrieved passage as the generator sees it."""

    text: str
    title: str = ""
    url: str = ""
    score: float = 0.0
    expert: str = ""
    document_id: int | None = None
    chunk_id: str = ""


@dataclass
class Answer:
    """The generated answer and the passages it cites (1-based ``[n]`` markers in the text)."""

    text: str
    citations: list[Passage] = field(default_factory=list)
    grounded: bool = True


def split_sentences(text: str) -> list[str]:
    parts = [p.strip() for p in _SENTENCE_SPLIT.split(text) if p and p.strip()]
    return [p for p in parts if len(p) >= 20 or len(parts) == 1]


def _tokens(text: str) -> set[str]:
    return {t for t in _WORD.findall(text.lower()) if t not in _STOP}


def extractive_answer(
    question: str,
    passages: list[Passage],
    embed: Callable[[list[str]], np.ndarray],
    *,
    max_sentences: int = 3,
    max_passages: int = 3,
    min_score: float = 0.25,
) -> Answer:
    """Pick the sentences that best answer ``question`` from the top passages.

    Args:
        question: the user's question.
        passages: retrieved passages, best first; ``score`` is the retrieval similarity.
        embed: returns L2-normalised vectors for a list of texts.
        max_sentences: sentences in the answer.
        max_passages: passages considered (and at most cited).
        min_score: below this best-passage similarity the answer is an honest "not found".
    """
    top = [p for p in passages[:max_passages] if p.text.strip()]
    if not top or max(p.score for p in top) < min_score:
        return Answer(text=NOT_FOUND, citations=[], grounded=False)
    candidates: list[tuple[int, int, str]] = []  # (passage index, position, sentence)
    for pi, passage in enumerate(top):
        for si, sentence in enumerate(split_sentences(passage.text)):
            candidates.append((pi, si, sentence))
    if not candidates:
        return Answer(text=NOT_FOUND, citations=[], grounded=False)
    vectors = embed([question] + [c[2] for c in candidates])
    sims = vectors[1:] @ vectors[0]
    q_tokens = _tokens(question)
    scores = []
    for (pi, _si, sentence), sim in zip(candidates, sims, strict=True):
        overlap = len(q_tokens & _tokens(sentence)) / max(1, len(q_tokens))
        rank_prior = 0.02 * (len(top) - pi)  # a small preference for the better-ranked passage
        scores.append(float(sim) + 0.15 * overlap + rank_prior)
    chosen = sorted(np.argsort(scores)[::-1][:max_sentences].tolist(), key=lambda i: (candidates[i][0], candidates[i][1]))
    cited: list[int] = []
    pieces = []
    for i in chosen:
        pi, _si, sentence = candidates[i]
        if pi not in cited:
            cited.append(pi)
        pieces.append(f"{sentence} [{cited.index(pi) + 1}]")
    return Answer(text=" ".join(pieces), citations=[top[pi] for pi in cited], grounded=True)
