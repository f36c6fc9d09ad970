"""Searching with the conversation: a follow-up question's query widened with the user's earlier turns.

Dense: the question's embedding plus ``weight`` times the mean of the earlier turns', normalised.
Sparse (BM25): the question's terms plus ``weight`` for each distinct term of the earlier turns. Only
the user's own turns are read, never the answers (they quote the documents searched for).
``CONTEXT_WEIGHT`` is the weight serving uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .sparse import bm25_vector

# The weight of the user's earlier turns in a follow-up's search (serving's ``SearchContext.weight``); a
# follow-up the router abstains on is searched alone whatever the weight (a change of subject). The smallest
# weight whose routed extractive F1 on doc2dial's validation split is within one standard error of the best;
# the smaller the weight, the more the question itself decides whether anything answers it
# (measured on doc2dial's off-topic follow-ups; figures in docs/EVALUATIONS.md).
CONTEXT_WEIGHT = 0.5


@dataclass(frozen=True)
class SearchContext:
    """The user's earlier turns of a conversation, as search reads them.

    turns: their text, oldest first (empty when only their embeddings are known: a stored conversation).
    vectors: their embeddings, one row each, in the question's embedding space; None: not known (or
        not in the question's space, as for the fast tier's vectors), and the dense query stays the question's.
    weight: how much they count against the question (0: not at all).
    """

    turns: tuple[str, ...] = ()
    vectors: np.ndarray | None = field(default=None, repr=False, compare=False)
    weight: float = 0.0

    def __post_init__(self) -> None:
        if not np.isfinite(self.weight) or self.weight < 0:
            raise ValueError(f"a conversation's weight in search is a number >= 0, not {self.weight}")

    @property
    def empty(self) -> bool:
        return not self.weight or (not self.turns and (self.vectors is None or not len(self.vectors)))

    @property
    def used_turns(self) -> int:
        """How many earlier turns the search reads (0 when it reads none)."""
        if not self.weight:
            return 0
        return max(len(self.turns), 0 if self.vectors is None else len(self.vectors))


def expand_query(dense: Sequence[float] | np.ndarray, indices: list[int], values: list[float],
                 context: SearchContext | None) -> tuple[np.ndarray, list[int], list[float]]:
    """The query (dense vector, sparse indices and values) widened with ``context`` (see the module).

    ``dense`` is the question's L2-normalised embedding and ``indices``, ``values`` its BM25 query
    terms; returned as they are (the vector as a float32 array) without a context.
    """
    vector = np.asarray(dense, dtype=np.float32)
    if context is None or context.empty:
        return vector, indices, values
    if context.vectors is not None and len(context.vectors):
        turns = np.asarray(context.vectors, dtype=np.float32).reshape(len(context.vectors), -1)
        if turns.shape[1] != vector.shape[0]:
            raise ValueError(f"the earlier turns' embeddings have {turns.shape[1]} dimensions, the question's {vector.shape[0]}")
        mixed = vector + context.weight * turns.mean(axis=0)
        norm = float(np.linalg.norm(mixed))
        if norm > 0:
            vector = (mixed / norm).astype(np.float32)
    words = " ".join(t for t in context.turns if t and t.strip())
    if words:
        merged = dict(zip(indices, values, strict=True))
        for index in bm25_vector(words, query=True)[0]:
            merged[index] = merged.get(index, 0.0) + context.weight
        indices = sorted(merged)
        values = [merged[k] for k in indices]
    return vector, indices, values
