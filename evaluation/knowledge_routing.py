"""``evaluate router --knowledge DIR``: the router with each expert's own documents as evidence.

Each domain's documents are indexed in a temporary collection (``build_domain_index``); the evidence
is what serving looks up (``VectorStore.evidence``) and ``routing.ml.knowledge.KnowledgeCombiner`` is
fitted on the router's validation split. Questions are scored as every other method is, and
``serve_one`` is what ``serving.route`` does per question, lookups included in ``route_p50_ms``.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from evaluation.datasets import cached_embeddings, read_jsonl
from evaluation.latency import Served
from evaluation.routing_metrics import classification_metrics, method_report, part_scores
from experts.models import Expert
from knowledge.evidence import collection_lookup
from knowledge.ml.chunking import chunk_text
from knowledge.ml.distinct import DistinctWords
from knowledge.ml.sparse import bm25_vector, sparse_text
from knowledge.points import embedding_text
from knowledge.stores.base import PointRecord
from knowledge.stores.edge import EdgeQdrantStore
from routing.ml.arbiter import Arbiter, LoadWindow
from routing.ml.knowledge import FIT_CANDIDATES, KnowledgeCombiner, MissingKnowledge, evidence_matrix, evidence_one
from routing.ml.training import abstain_threshold


@dataclass
class DomainIndex:
    """A dataset's documents chunked as an expert's are and indexed into one temporary collection per domain ("eval_<domain>")."""

    units: list[dict[str, Any]]
    domains: list[str]
    chunks: list[tuple[int, str]]  # (unit row, chunk text)
    store: EdgeQdrantStore
    root: str
    index_s: float

    def close(self) -> None:
        self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)


def build_domain_index(dataset: Path, say: Callable[[str], Any]) -> DomainIndex:
    """Chunk ``docs.jsonl`` with the Expert defaults, embed (cached) and index dense + BM25 by domain.

    The collections live in a temporary Qdrant Edge store (never the app's) with serving's pointer cache
    (``QDRANT_POINTER_TTL_S``): timed searches pay what a served request pays.
    """
    units = read_jsonl(Path(dataset) / "docs.jsonl")
    domains = sorted({u["domain"] for u in units})
    size = int(Expert._meta.get_field("chunk_size").default)
    overlap = int(Expert._meta.get_field("chunk_overlap").default)
    say(f"{Path(dataset).name}: {len(units):,} documents in {len(domains)} domains, chunks of {size}/{overlap}")
    chunks = [(i, chunk.text) for i, unit in enumerate(units) for chunk in chunk_text(unit["text"], size=size, overlap=overlap)]
    chunk_texts = [embedding_text(units[i]["title"], text) for i, text in chunks]
    encoding = {"threads": max(1, settings.TORCH_THREADS), "batch_size": 64}
    vectors = cached_embeddings(f"{Path(dataset).name}-chunks-{size}-{overlap}", chunk_texts, settings.EMBEDDING_MODEL, say, **encoding)
    by_domain: dict[str, list[PointRecord]] = defaultdict(list)
    for row, (i, text) in enumerate(chunks):
        indices, values = bm25_vector(sparse_text(units[i]["title"], text))
        by_domain[units[i]["domain"]].append(PointRecord(
            id=hashlib.md5(f"{i}:{row}".encode()).hexdigest(), dense=vectors[row].tolist(), sparse_indices=indices, sparse_values=values,
            payload={"document_id": i, "unit": units[i]["doc_id"], "domain": units[i]["domain"]},
        ))
    root = tempfile.mkdtemp(prefix="router-knowledge-")
    store = EdgeQdrantStore(root, pointer_ttl_s=float(settings.QDRANT_POINTER_TTL_S))
    t0 = time.perf_counter()
    for domain in domains:  # every domain, even one whose documents gave no chunk
        store.rebuild(f"eval_{domain}", vectors.shape[1], by_domain[domain])
    index_s = time.perf_counter() - t0
    say(f"  indexed {len(chunks):,} chunks into {len(domains)} collections in {index_s:.1f} s")
    return DomainIndex(units, domains, chunks, store, root, index_s)


class KnowledgeRouting:
    """The trained router plus the documents of ``folder`` as evidence, fitted on ``split``'s validation rows."""

    def __init__(self, split: Any, router: Any, folder: Path, say: Any, target_recall: float, seed: int = 0, router_threshold: float | None = None):
        self.index = build_domain_index(Path(folder), say)
        missing = [c for c in split.classes if c not in self.index.domains]
        if missing:
            self.index.close()
            raise MissingKnowledge(missing)
        self.lookup = collection_lookup(lambda: self.index.store, [f"eval_{c}" for c in split.classes])
        self.router = router
        self.words = _distinct_words(self.index.units, list(split.classes))
        x_val, texts_val = split.part("val")
        probs, score = router.scores(x_val, texts_val)
        dense, keywords = evidence_matrix(self.lookup, probs, x_val, texts_val, k=FIT_CANDIDATES)
        y_val = split.y[split.idx["val"]]
        words_val = self.words.scores(texts_val)
        self.combiner = KnowledgeCombiner.fit(probs, score, dense, keywords, y_val, split.classes, seed=seed,
                                              held_out_score=router.held_out_scores(x_val, texts_val, y_val),
                                              words=words_val, held_out_words=self.words.scores(texts_val, exclude=y_val))
        # As training does: a combiner validation kept neither for ranking nor for abstention is not served,
        # and the router's own threshold stands.
        kept = self.combiner.serves
        self.threshold = abstain_threshold(self.combiner.combine(probs, score, dense, keywords, words_val)[1], target_recall) if kept else router_threshold
        say(f"  knowledge-aware routing: {self.combiner.report}")

    def scores(self, x: np.ndarray, texts: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        texts = texts or [""] * len(x)
        probs, score = self.router.scores(x, texts)
        if not self.combiner.serves:
            return probs, score
        return self.combiner.combine(probs, score, *evidence_matrix(self.lookup, probs, x, texts), self.words.scores(texts))

    def serve_one(self, vector: np.ndarray, text: str, arbiter: Arbiter, experts: list[str], char_logits: np.ndarray | None = None) -> str:
        """What ``serving.route`` does after encoding, with the evidence: score, look up, combine, arbitrate.

        ``char_logits``: the words' reading (``TextRouter.read_text``) made while the encoder worked.
        """
        probs, score = self.router.score_one(vector, text, char_logits=char_logits)
        if self.combiner.serves:
            cand, dense, keywords = evidence_one(self.lookup, probs, vector, text, self.combiner.candidates)
            words = self.words.score(text) if self.combiner.word_scale else 0.0
            probs, score = self.combiner.combine_one(probs, score, cand, dense, keywords, words)
        return arbiter.decide(dict(zip(experts, probs.tolist(), strict=True)), top_k=2, score=score).chosen[0]

    def served(self, experts: list[str]) -> Served:
        """``serve_one`` with its own arbiter, as ``measure_latency`` times a method (the words read while the encoder works)."""
        arbiter = Arbiter(window=LoadWindow(500))
        return Served(lambda vector, text, words: self.serve_one(vector, text, arbiter, experts, words), self.router.read_text)

    def report(self, split: Any, latency: dict[str, Any]) -> dict[str, Any]:
        """The figures every method gets (``method_report`` on test, out-of-scope and unseen-label rows), its latency and its fit."""
        n = len(split.classes)
        unseen = part_scores(self, split.part("unseen"), n) if len(split.idx["unseen"]) else None
        out = method_report(split.y[split.idx["test"]], part_scores(self, split.part("test"), n), part_scores(self, split.part("oos"), n), n,
                            self.threshold, unseen)
        return {**out, **latency, **self.describe()}

    def documents_only(self, split: Any) -> dict[str, Any]:
        """The baseline routing with documents must reach: each question to the expert whose documents hold its
        most similar chunk (best dense cosine in each collection; no labelled question used), and that
        cosine as the in-scope score."""
        n = len(split.classes)

        def scored(part: str) -> tuple[np.ndarray, np.ndarray]:
            x, texts = split.part(part)
            if not len(x):
                return np.zeros((0, n)), np.zeros(0)
            dense = np.nan_to_num(evidence_matrix(self.lookup, np.ones((len(x), n)), x, texts, k=n)[0], nan=-1.0)
            return dense, dense.max(axis=1)

        out = method_report(split.y[split.idx["test"]], scored("test"), scored("oos"), n, None,
                            scored("unseen") if len(split.idx["unseen"]) else None)
        out["val_macro_f1"] = classification_metrics(split.y[split.idx["val"]], scored("val")[0].argmax(axis=1), n)["macro_f1"]
        return out

    def close(self) -> None:
        self.index.close()

    def describe(self) -> dict[str, Any]:
        return {
            "documents": len(self.index.units), "chunks": len(self.index.chunks), "index_s": round(self.index.index_s, 2),
            "combiner": self.combiner.report, "weights": [round(float(w), 4) for w in self.combiner.weights],
            "score_scale": round(self.combiner.score_scale, 4), "word_scale": round(self.combiner.word_scale, 4), "abstain_threshold": self.threshold,
            "how": "router (train_text_router) + each candidate expert's best dense cosine and BM25 score in its own collection, "
                   "combined by a conditional logit fitted and kept or dropped on the router's validation split",
        }


def _distinct_words(documents: list[dict[str, Any]], domains: list[str]) -> DistinctWords:
    """``DistinctWords`` over the indexed documents, one expert per domain, as serving builds it from each expert's documents."""
    from encoders import tokenizer_words

    return DistinctWords.from_texts(([f"{d['title']}\n{d['text']}" for d in documents if d["domain"] == domain] for domain in domains),
                                    tokenizer_words(settings.EMBEDDING_MODEL))
