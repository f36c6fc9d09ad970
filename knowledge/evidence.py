"""The experts' documents as routing evidence (``routing.ml.knowledge``): each collection's best match for a question."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from encoders import embedding_space
from experts.selectors import experts_by_slug

from .ml.sparse import bm25_vector
from .selectors import collection_models, collection_name
from .stores import VectorStore, get_store

EvidenceLookup = Callable[[list[int], Any, str], list["tuple[float, float] | None"]]


def evidence_lookup(slugs: list[str]) -> EvidenceLookup:
    """A lookup for knowledge-aware routing (``routing.ml.knowledge``) over the experts ``slugs``, by position.

    ``lookup(positions, question vector, question)`` returns, for each expert at those positions,
    (the best dense cosine of the question in its collection, the best BM25 score of its words),
    or None where the expert does not exist, has no indexed chunk, or its collection was embedded
    by another model (its cosines would mean nothing). ``StoreUnavailable`` propagates: the caller
    routes without the evidence.
    """
    rows = experts_by_slug(slugs)
    models = collection_models(list(rows.values()))
    space = embedding_space()
    names = [
        collection_name(rows[s]) if s in rows and models.get(rows[s].pk, space) == space else None
        for s in slugs
    ]
    return collection_lookup(get_store, names)


def collection_lookup(store: Callable[[], VectorStore], names: list[str | None]) -> EvidenceLookup:
    """``evidence_lookup`` over the collections ``names`` by position (None: no collection to ask) in ``store()``'s store."""

    def lookup(positions: list[int], vector: Any, question: str) -> list[tuple[float, float] | None]:
        wanted = [names[j] for j in positions if names[j]]
        if not wanted:
            return [None] * len(positions)
        indices, values = bm25_vector(question, query=True)
        found = store().evidence(wanted, np.asarray(vector, dtype=np.float32), indices, values)
        return [found.get(names[j]) if names[j] else None for j in positions]

    return lookup


def experts_without_documents(slugs: list[str]) -> list[str]:
    """Those of ``slugs`` whose collection holds no chunk (or that do not exist)."""
    rows = experts_by_slug(slugs)
    store = get_store()
    return [s for s in slugs if s not in rows or not store.count(collection_name(rows[s]))]
