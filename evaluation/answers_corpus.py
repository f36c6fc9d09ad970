"""The documents and questions of an answers run: the documents chunked and indexed as experts' are (one
collection per domain), the questions routed by the product's router and searched per mode as serving searches."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.abstentions import ProductRoutes, product_routes
from evaluation.answers_config import SEED, Say
from evaluation.datasets import cached_embeddings, index_by_domain
from experts.ml.extractive import Passage, split_sentences
from experts.models import Expert
from knowledge.ml.chunking import chunk_text
from knowledge.ml.conversation import SearchContext, expand_query
from knowledge.ml.routed import routing_weights
from knowledge.ml.sparse import bm25_vector
from knowledge.points import embedding_text
from knowledge.search import search_collections, weight_power
from knowledge.stores.base import Hit
from knowledge.stores.embedded import EmbeddedQdrantStore


@dataclass
class Corpus:
    """The dataset's documents as a run indexes them: one collection per domain, each chunk's sentence vectors."""

    domains: list[str]
    names: list[str]
    units: list[dict[str, Any]]
    store: EmbeddedQdrantStore
    root: str
    sentence_blocks: dict[int, np.ndarray]  # chunk row -> its sentence vectors (as indexing stores them)
    chunks: int
    index_s: float

    def close(self) -> None:
        import shutil

        self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def passages(self, hits: list[Hit]) -> list[Passage]:
        """Hits as the serving path's passages (``serving.chat._to_passages``), index-time sentence vectors included."""
        out = []
        for h in hits:
            block = self.sentence_blocks.get(h.payload["chunk"])  # by payload: the store may rewrite point ids
            out.append(Passage(
                text=h.payload["text"], title=h.payload["title"], score=h.dense_score, expert=h.payload["domain"],
                document_id=h.payload["document_id"], chunk_id=h.id, sentence_vectors=(lambda b=block: b) if block is not None else None,
            ))
        return out


@dataclass
class Question:
    """One question to answer: its gold answer and domain, and per mode the passages searched and the adapter that answers."""

    row: int
    text: str
    gold: str
    domain: int
    relevant: set[str]
    passages: dict[str, list[Passage]] = field(default_factory=dict)  # by mode
    adapter: dict[str, str] = field(default_factory=dict)  # by mode: the lora generator's adapter


def index_corpus(dataset: Path, units: list[dict[str, Any]], say: Say, encoding: dict[str, int]) -> Corpus:
    """Chunk, embed (cached) and index the documents into one collection per domain, with each chunk's sentence vectors."""
    from django.conf import settings

    model = settings.EMBEDDING_MODEL
    domains = sorted({u["domain"] for u in units})
    size = int(Expert._meta.get_field("chunk_size").default)
    overlap = int(Expert._meta.get_field("chunk_overlap").default)
    chunks = [(i, c.text) for i, u in enumerate(units) for c in chunk_text(u["text"], size=size, overlap=overlap)]
    cx = cached_embeddings(f"{dataset.name}-chunks-{size}-{overlap}", [embedding_text(units[i]["title"], t) for i, t in chunks], model, say, **encoding)
    sentences = [split_sentences(t) for _, t in chunks]
    flat = [s for group in sentences for s in group]
    sx = cached_embeddings(f"{dataset.name}-chunk-sentences-{size}-{overlap}", flat, model, say, **encoding) if flat else np.zeros((0, cx.shape[1]))
    blocks: dict[int, np.ndarray] = {}
    offset = 0
    for row in range(len(chunks)):
        block = sx[offset : offset + len(sentences[row])]
        offset += len(sentences[row])
        if len(block):
            blocks[row] = block

    def payload(i: int, row: int, text: str) -> dict[str, Any]:
        unit = units[i]
        return {"document_id": i, "chunk": row, "unit": unit["doc_id"], "domain": unit["domain"], "title": unit.get("title") or "", "text": text}

    store, root, index_s = index_by_domain(chunks, units, cx, "answers-eval-", payload)
    say(f"  indexed {len(chunks):,} chunks of {len(units):,} documents into {len(domains)} collections in {index_s:.1f} s")
    return Corpus(domains, [f"eval_{d}" for d in domains], units, store, root, blocks, len(chunks), index_s)


def route_questions(dataset: Path, queries: list[dict[str, Any]], qx: np.ndarray, y: np.ndarray, domains: list[str], say: Say,
                    encoding: dict[str, int]) -> tuple[ProductRoutes, list[int], list[int]]:
    """The product's routing of every question with a known domain (``evaluation.abstentions.product_routes``), and the train and val rows."""
    from django.conf import settings

    from evaluation.retrieval import split_rows

    train, val, _, validation = split_rows(queries, y, {})
    routes = product_routes(dataset, queries, qx, [i for i in range(len(queries)) if y[i] >= 0 and queries[i].get("text")], domains,
                            settings.EMBEDDING_MODEL, say, SEED, encoding)
    routes.report["validation"] = validation
    return routes, train, val


def search_passages(corpus: Corpus, plan: dict[str, float], dense: np.ndarray, question: str, limit: int,
                    context: SearchContext | None = None) -> list[Passage]:
    """The serving search's passages for ``question`` (with ``context``: widened with the user's earlier turns, as served)."""
    searched, indices, values = expand_query(dense, *bm25_vector(question, query=True), context)
    return corpus.passages(search_collections(corpus.store, plan, searched.tolist(), indices, values, limit=limit, method="hybrid"))


def mode_plans(q: Question, probs: np.ndarray, corpus: Corpus, threshold: float,
               fast_probs: np.ndarray | None = None, served: list[int] | None = None, widened: bool = False) -> dict[str, tuple[dict[str, float], list[int]]]:
    """Each mode's collection weights and the domains (best first) whose adapter may answer.

    ``fast_probs``: the fast tier's probabilities for this question; with them, ``fast`` is
    ``auto:fast`` as served (its top expert, widened with what it leaves over). ``served``: the
    candidates in serving's order (``ProductRoutes.served``: the conversation's expert kept first,
    or alone for a question the router abstains on); ``auto`` searches its first two. Without it
    (or empty: no expert would answer; ``evaluate answers`` then searches nothing), the router's
    two most probable. ``widened``: the search reads the conversation's earlier turns (the router's
    weights then count as serving counts them there: ``weight_power(widened=True)``).
    """
    names = corpus.names
    power = weight_power(widened)
    order = list(served[:2]) if served else [int(j) for j in np.argsort(-probs)[:2]]
    routed = routing_weights([names[j] for j in order], [float(probs[j]) for j in order], names, threshold, power=power)
    plans = {"flat": (dict.fromkeys(names, 1.0), []), "auto": (routed, order), "oracle": ({names[q.domain]: 1.0}, [q.domain])}
    if fast_probs is not None:
        top = int(np.argmax(fast_probs))
        plans["fast"] = (routing_weights([names[top]], [float(fast_probs[top])], names, threshold, power=power), [top])
    return plans
