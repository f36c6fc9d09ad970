"""Searching experts' collections: one expert's, or the routed experts' as one, with the question's spelling mended first.

Serving searches through ``search_experts`` and reads each hit's sentence vectors with
``sentence_vector_reader``; the evaluations search through ``search_collections`` with the same plan.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings

from encoders import embedding_space, get_encoder, tokenizer_words
from experts.models import Expert
from experts.selectors import active_expert_slugs, active_experts, experts_by_slug

from .ml import conversation as search_conversation
from .ml import routed
from .ml.conversation import SearchContext, expand_query
from .ml.routed import routing_weights
from .ml.sentences import unpack_vectors
from .ml.sparse import bm25_vector
from .ml.spelling import Correction
from .selectors import collection_models, collection_name
from .stores import Hit, VectorStore, get_store
from .vocabulary import vocabulary

logger = logging.getLogger(__name__)


def _query(question: str, query_vector: list[float] | None) -> tuple[list[float], list[int], list[float]]:
    dense = query_vector if query_vector is not None else get_encoder().encode([question])[0].tolist()
    indices, values = bm25_vector(question, query=True)
    return dense, indices, values


def _method_for(expert_models: dict[int, str], experts: list[Expert], method: str) -> str:
    """Dense vectors of another model mean nothing: if any collection has them, fall back to keyword search."""
    space = embedding_space()
    if method != "sparse" and any(expert_models.get(e.pk, space) != space for e in experts):
        logger.warning("knowledge.search.model_mismatch", extra={"experts": [e.slug for e in experts]})
        return "sparse"
    return method


def search_expert(expert: Expert, question: str, limit: int = 5, query_vector: list[float] | None = None, method: str = "hybrid") -> list[Hit]:
    """Search one expert's collection: "hybrid" (dense + sparse, RRF-fused), "dense" or "sparse"."""
    dense, indices, values = _query(question, query_vector)
    method = _method_for(collection_models([expert]), [expert], method)
    return get_store().search(collection_name(expert), dense, indices, values, limit=limit, method=method)


def context_weight() -> float:
    """How much a conversation's earlier user turns count in its follow-up's search (``knowledge.ml.conversation.CONTEXT_WEIGHT``)."""
    return search_conversation.CONTEXT_WEIGHT


def search_collections(store: VectorStore, weights: dict[str, float], dense: list[float], indices: list[int], values: list[float],
                       limit: int = 5, method: str = "hybrid") -> list[Hit]:
    """One search over the weighted collections (see ``VectorStore.search_many``)."""
    names = list(weights)
    if len(names) == 1:
        return store.search(names[0], dense, indices, values, limit=limit, method=method)
    return store.search_many(names, dense, indices, values, limit=limit, method=method, weights=[weights[n] for n in names])


def search_experts(experts: list[Expert], question: str, limit: int = 5, weights: list[float] | None = None, query_vector: list[float] | None = None,
                   *, method: str = "hybrid", flat: bool = False, allowed: set[str] | None = None, context: SearchContext | None = None) -> list[Hit]:
    """Search the chosen experts' collections as one, each weighted by the router's confidence in it.

    Every candidate is ranked globally (cosines and BM25 with IDF over all collections) before RRF
    fusion, and a chunk's score is its RRF score times its expert's weight. When the weights add up to
    less than ``knowledge.ml.routed.WIDEN_BELOW`` the other active experts are searched with what is left over.

    Args:
        experts: the chosen experts, best first.
        question: the user's question (its words feed the sparse search).
        limit: chunks to return.
        weights: the router's probability for each chosen expert; None treats them alike.
        query_vector: the question's embedding if the caller has it already.
        method: "hybrid", "dense" or "sparse".
        flat: ignore the routing and search every active expert's collection as one (for comparison).
        allowed: the only expert slugs the caller may read (an API key's scope): widening never
            reaches past them. None: every active expert.
        context: the user's earlier turns (``knowledge.ml.conversation``): the query is widened with them.
    """
    if flat:
        experts, weights = list(active_experts()), None
    if not experts:
        return []
    dense, indices, values = _query(question, query_vector)
    searched, indices, values = expand_query(dense, indices, values, context)
    names = {collection_name(e): e for e in experts}
    others: list[Expert] = []
    if weights is not None and sum(max(0.0, w) for w in weights) < routed.WIDEN_BELOW:
        # The serving caches' copy of the active experts (ordered by slug): no query per routed request.
        candidates = experts_by_slug(active_expert_slugs()).values()
        others = [e for e in candidates if collection_name(e) not in names and (allowed is None or e.slug in allowed)]
    # The router's probabilities weigh less in a search widened with the conversation's earlier turns (``expand_query``).
    power = routed.CONTEXT_WEIGHT_POWER if context is not None and not context.empty else routed.WEIGHT_POWER
    plan = routing_weights(list(names), weights, [collection_name(e) for e in others], routed.WIDEN_BELOW, power=power)
    everyone = list(experts) + others
    method = _method_for(collection_models(everyone), everyone, method)
    return search_collections(get_store(), plan, searched, indices, values, limit=limit, method=method)


def correct_spelling(experts: list[Expert], question: str) -> Correction:
    """``question`` with its unknown words replaced by the closest words of the experts' documents (``knowledge.ml.spelling``).

    Off (the question as written) with ``RETRIEVAL_SPELLING`` false or without experts.
    """
    if not settings.RETRIEVAL_SPELLING or not experts:
        return Correction(question)
    return vocabulary(experts).correct(question, tokenizer_words(settings.EMBEDDING_MODEL))


def sentence_vector_reader(payload: dict[str, Any]) -> Callable[[], Any] | None:
    """Reads a chunk payload's sentence vectors (float32 rows) when called; None: absent, or made by
    another encoder than serving's. Decoding waits for the call: most retrieved chunks are cached already."""
    packed = payload.get("sentence_vectors")
    if not packed:
        return None
    encoder = get_encoder()
    if payload.get("sentence_model") != encoder.name:
        return None
    return functools.partial(unpack_vectors, packed, encoder.dimension)
