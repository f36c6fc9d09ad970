"""``manage.py evaluate retrieval``: flat vs oracle vs routed retrieval, dense / sparse / hybrid.

The dataset's documents (``docs.jsonl``, or ``passages.jsonl`` with ``--passages``) are chunked as
an expert's documents are (the Expert defaults: 1000 characters, 150 overlap) and indexed into one
collection per domain in a temporary ``EmbeddedQdrantStore`` (never the app's store or database).
Queries are the test split's user turns (``text``); gold comes from ``qrels.jsonl`` /
``qrels_passages.jsonl``. A document counts as retrieved when any of its chunks is in the top 5
after chunks are deduplicated by document.

What the product runs, and so what the headline modes measure: the product's router
(``evaluation.abstentions.product_routes``: trained as ``evaluate router`` trains it) ranks the
question, and a follow-up it is unsure of alone again with the *user's* earlier turns
(``routing.ml.conversation``; serving keeps the embeddings of a conversation's earlier questions,
never the agent's answers), and retrieval searches with the question widened by the same turns
(``knowledge.ml.conversation`` at its ``CONTEXT_WEIGHT``: the last
``serving.conversations.CONTEXT_TURNS``). doc2dial's agent turns copy the gold document, so no mode
here ever reads them (``datasets.user_turns``).

Modes, all through the serving code's search (``knowledge.search.search_collections``):

* ``flat``: one search over every domain's collection as one (global ranks, IDF over all).
* ``oracle``: the gold domain's collection alone (a perfect, hard router).
* ``routed_top1`` / ``routed_top2``: the router's first one or two domains weighted by its
  probabilities, widened to every domain with the probability left over when the chosen ones hold
  less than ``knowledge.ml.routed.WIDEN_BELOW`` (``routing_weights``), i.e. what
  ``search_experts`` does for the ``auto:fast`` and ``auto`` chat modes, routed as served (above);
  the search reads the question widened with the user's earlier turns as serving does (alone for
  the follow-ups the product's router abstains on: a change of subject). ``routed_top1_question_search``
  / ``_top2_question_search``: the same routing, searched with the question alone (what serving did
  before it read the turns).
* ``routed_question_only_top1`` / ``_top2``: a ``RouterNet`` trained on the questions alone
  (``routing.ml.training.train_router``; ``routed_top1_text_only`` / ``routed_top2_text_only``, kept
  for scripts, are the same figures). Router and retrieval see the question only.
* ``routed_text_router_top1`` / ``_top2``: question only, routed by the product's router
  (``train_text_router``: the network and the spelling view, as ``routing.services`` trains it).
* ``routed_knowledge_top1`` / ``_top2``: the same router with each candidate expert's evidence in
  its own collection (``routing.ml.knowledge``, fitted on val): what serving does with
  ``ROUTER_KNOWLEDGE`` on for a question without earlier turns.
* ``routed_fast_top1``: ``auto:fast`` with the fast tier (``routing.ml.fast_encoder``, trained as
  router training trains it, on train and val): its router's top expert, searched with its
  encoder's vector (dense) and the question's words (BM25), no sentence encoder.
* ``flat_context`` / ``oracle_context``: not a product path, a yardstick: the retrieval query is
  expanded with the same user turns (dense: question + ``μ`` times their mean embedding; sparse:
  the question's terms plus ``μ`` times theirs), to show what the conversation is worth to search
  without any router.

Choices made on validation only (the dataset's ``val`` split, or a seeded stratified 10% of train
carved out when it has none; ``validation`` in the report says which): ``μ`` by ``flat_context``
hybrid nDCG@5. The question-only ``RouterNet`` is trained with ``train_router`` on train (early
stopping and calibration on val); its probabilities are cached under a key made of the inputs, the
training config and a hash of the training code, so a change of any of them retrains.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.abstentions import product_routes
from evaluation.datasets import (
    DomainIndex,
    build_domain_index,
    cached_embeddings,
    carve_validation,
    code_fingerprint,
    dataset_embeddings,
    embedding_cache_dir,
    read_jsonl,
    search_contexts,
    typo_copy_encoder,
    user_turns,
    validation_note,
)
from evaluation.fast_tier import fast_tier_vectors
from knowledge.evidence import collection_lookup
from knowledge.ml.conversation import SearchContext, expand_query
from knowledge.ml.routed import routing_weights
from knowledge.ml.sparse import bm25_vector
from knowledge.search import context_weight, search_collections, weight_power, widen_below, widens
from knowledge.stores.embedded import EmbeddedQdrantStore

K = 5
CHUNKS_PER_QUERY = 20  # chunks fetched before deduplicating by document and cutting at K
CONTEXT_WEIGHTS = (0.0, 0.5, 1.0, 2.0, 4.0)
VAL_SHARE = 0.1
SEED = 0
TYPO_RATE = 0.1
METHODS = ("dense", "sparse", "hybrid")
# BM25 on the same files (shared/datasets/README.md): recall@5 / nDCG@5.
BM25_REFERENCE = {"flat": (0.539, 0.443), "oracle": (0.602, 0.491)}


def ndcg_at_k(ranked: list[str], gold: set[str], k: int = K) -> float:
    """Binary-relevance nDCG@k."""
    dcg = sum(1.0 / np.log2(i + 2) for i, unit in enumerate(ranked[:k]) if unit in gold)
    ideal = sum(1.0 / np.log2(i + 2) for i in range(min(len(gold), k)))
    return float(dcg / ideal) if ideal else 0.0


def recall_at_k(ranked: list[str], gold: set[str], k: int = K) -> float:
    return len(set(ranked[:k]) & gold) / len(gold) if gold else 0.0


def _dedupe(units: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for unit in units:
        seen.setdefault(unit, None)
    return list(seen)


def _context_vectors(queries: list[dict[str, Any]], turn_vectors: dict[str, np.ndarray], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean embedding of each query's earlier user turns (zeros without any), and whether it has any."""
    means = np.zeros((len(queries), dim), dtype=np.float32)
    has = np.zeros(len(queries), dtype=bool)
    for i, query in enumerate(queries):
        turns = [turn_vectors[t] for t in user_turns(query) if t in turn_vectors]
        if turns:
            means[i], has[i] = np.mean(turns, axis=0), True
    return means, has


def router_cache_key(x: np.ndarray, y: np.ndarray, train: list[int], val: list[int], n: int, key: str, model_kwargs: dict[str, Any], config: Any) -> str:
    """The cached router's key: its inputs, its model and training config, and a hash of the training code."""
    from dataclasses import asdict

    from routing.ml import router as router_module
    from routing.ml import training

    spec = json.dumps([train, val, n, key, model_kwargs, asdict(config), code_fingerprint(training, router_module)], sort_keys=True, default=str)
    return hashlib.sha256(x.tobytes() + y.tobytes() + spec.encode()).hexdigest()[:16]


def _train_router(x: np.ndarray, y: np.ndarray, train: list[int], val: list[int], n: int, key: str, say: Callable[[str], None]) -> tuple[np.ndarray, dict[str, Any]]:
    """RouterNet probabilities for every row (cached by ``router_cache_key``: training takes minutes on a shared CPU)."""
    from routing.ml.training import DEFAULT_MODEL_KWARGS, TrainConfig, predict_proba, train_router

    model_kwargs, config = dict(DEFAULT_MODEL_KWARGS), TrainConfig(device="cpu", seed=SEED)
    digest = router_cache_key(x, y, train, val, n, key, model_kwargs, config)
    path = embedding_cache_dir().parent / "retrieval" / f"router-{digest}.npz"
    if path.exists():
        cached = np.load(path, allow_pickle=False)
        return cached["probs"], json.loads(str(cached["metrics"]))
    t0 = time.perf_counter()
    result = train_router(x[train], y[train], x[val], y[val], n, model_kwargs, config)
    probs = predict_proba(result.model, x)
    metrics = {"val_accuracy": round(result.metrics["val"]["accuracy"], 4), "epochs": result.metrics["epochs_run"], "train_s": round(time.perf_counter() - t0, 1),
               "cache_key": digest}
    say(f"  router ({key}): val accuracy {metrics['val_accuracy']:.3f} after {metrics['epochs']} epochs, {metrics['train_s']} s")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.partial.npz")
    np.savez(tmp, probs=probs, metrics=np.array(json.dumps(metrics)))
    tmp.replace(path)
    return probs, metrics


def _train_text_router(queries: list[dict[str, Any]], x: np.ndarray, y: np.ndarray, train: list[int], val: list[int], n: int, name: str,
                       say: Callable[[str], None]) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The product's question-only router (``train_text_router``: typo copies, spelling view): (probabilities, in-scope scores, metrics) of every row, cached."""
    from routing.ml import charview, inscope, nearest, textrouter
    from routing.ml.training import DEFAULT_MODEL_KWARGS, TrainConfig

    model_kwargs, config = dict(DEFAULT_MODEL_KWARGS), TrainConfig(device="cpu", seed=SEED)
    texts = [str(q.get("text") or "") for q in queries]
    digest = router_cache_key(x, y, train, val, n, "text_router:" + code_fingerprint(textrouter, charview, nearest, inscope), model_kwargs, config)
    path = embedding_cache_dir().parent / "retrieval" / f"text-router-{digest}.npz"
    if path.exists():
        cached = np.load(path, allow_pickle=False)
        return cached["probs"], cached["scores"], json.loads(str(cached["metrics"]))
    t0 = time.perf_counter()
    from django.conf import settings

    embed = typo_copy_encoder(name, settings.EMBEDDING_MODEL, say)
    result = textrouter.train_text_router([texts[i] for i in train], x[train], y[train], [texts[i] for i in val], x[val], y[val], n, embed, model_kwargs, config)
    probs, scores = result.router.scores(x, texts)
    metrics = {"val_accuracy": round(result.metrics["val"]["accuracy"], 4), "epochs": result.metrics["epochs_run"], "train_s": round(time.perf_counter() - t0, 1),
               "cache_key": digest}
    say(f"  router (text_router): val accuracy {metrics['val_accuracy']:.3f}, {metrics['train_s']} s")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.partial.npz")
    np.savez(tmp, probs=probs, scores=scores, metrics=np.array(json.dumps(metrics)))
    tmp.replace(path)
    return probs, scores, metrics


def _with_knowledge(store: Any, names: list[str], queries: list[dict[str, Any]], qx: np.ndarray, probs: np.ndarray, scores: np.ndarray,
                    y: np.ndarray, val: list[int]) -> tuple[np.ndarray, dict[str, Any]]:
    """The router's probabilities with each candidate's evidence in its collection (``routing.ml.knowledge``, fitted on val), for every row."""
    from routing.ml.knowledge import KnowledgeCombiner, evidence_matrix

    lookup = collection_lookup(lambda: store, list(names))
    texts = [str(q.get("text") or "") for q in queries]
    rows = np.asarray([i for i in range(len(queries)) if y[i] >= 0])
    dense, keywords = evidence_matrix(lookup, probs[rows], qx[rows], [texts[i] for i in rows])
    at = {int(i): k for k, i in enumerate(rows)}
    v = [at[i] for i in val]
    combiner = KnowledgeCombiner.fit(probs[rows][v], scores[rows][v], dense[v], keywords[v], y[val], seed=SEED)
    out = probs.copy()
    out[rows] = combiner.combine(probs[rows], scores[rows], dense, keywords)[0]
    return out, combiner.report


def _typo_report(index: DomainIndex, queries: list[dict[str, Any]], qx: np.ndarray, test: list[int], y: np.ndarray, gold: dict[str, set[str]],
                 name: str, say: Callable[[str], None]) -> dict[str, Any]:
    """Hybrid recall@5 / nDCG@5 of the flat and oracle searches on the test questions with 10% letter typos, as written and spell-corrected.

    Correction is the product's (``knowledge.ml.spelling``: each unknown word becomes the closest
    word of the searched collections' documents; the encoder tokenizer's whole words count as
    known): against every domain's words for ``flat``, the gold domain's for ``oracle``.
    """
    from django.conf import settings

    from encoders import tokenizer_words
    from knowledge.ml.spelling import Vocabulary
    from routing.ml.charview import typo_copies

    model = settings.EMBEDDING_MODEL
    words = tokenizer_words(model)
    by_domain = {d: Vocabulary.from_texts(f"{u['title']}\n{u['text']}" for u in index.units if u["domain"] == d) for d in index.domains}
    everyone = Vocabulary.merge(by_domain.values())
    written = [str(queries[i]["text"]) for i in test]
    texts = typo_copies(written, TYPO_RATE, SEED)
    flat_fixed = [everyone.correct(t, words) for t in texts]
    oracle_fixed = [by_domain[index.domains[y[i]]].correct(t, words) for i, t in zip(test, texts, strict=True)]
    # What the correction does to the questions as written (the product corrects every question).
    clean_fixed = {"flat": [everyone.correct(t, words) for t in written],
                   "oracle": [by_domain[index.domains[y[i]]].correct(t, words) for i, t in zip(test, written, strict=True)]}
    encoding = {"threads": max(1, settings.TORCH_THREADS), "batch_size": 64}
    vectors = {
        "typos": cached_embeddings(f"{name}-retrieval-typos10-test", texts, model, say, **encoding),
        "flat": cached_embeddings(f"{name}-retrieval-typos10-corrected-flat", [c.text for c in flat_fixed], model, say, **encoding),
        "oracle": cached_embeddings(f"{name}-retrieval-typos10-corrected-oracle", [c.text for c in oracle_fixed], model, say, **encoding),
        "clean_flat": cached_embeddings(f"{name}-retrieval-test-corrected-flat", [c.text for c in clean_fixed["flat"]], model, say, **encoding),
        "clean_oracle": cached_embeddings(f"{name}-retrieval-test-corrected-oracle", [c.text for c in clean_fixed["oracle"]], model, say, **encoding),
    }
    names = index.names
    out: dict[str, Any] = {}
    for mode in ("flat", "oracle"):
        for variant in ("as_written", "as_written_corrected", "typos", "typos_corrected"):
            rows = []
            for k, i in enumerate(test):
                plan = dict.fromkeys(names, 1.0) if mode == "flat" else {names[y[i]]: 1.0}
                if variant == "as_written":
                    text, vector = str(queries[i]["text"]), qx[i]
                elif variant == "as_written_corrected":
                    text, vector = clean_fixed[mode][k].text, vectors[f"clean_{mode}"][k]
                elif variant == "typos":
                    text, vector = texts[k], vectors["typos"][k]
                else:
                    text, vector = (flat_fixed if mode == "flat" else oracle_fixed)[k].text, vectors[mode][k]
                hits = search_collections(index.store, plan, vector.tolist(), *bm25_vector(text, query=True), limit=CHUNKS_PER_QUERY, method="hybrid")
                ranked = _dedupe([h.payload["unit"] for h in hits])
                relevant = gold[queries[i]["query_id"]]
                rows.append((recall_at_k(ranked, relevant), ndcg_at_k(ranked, relevant)))
            out.setdefault(mode, {})[variant] = {"recall@5": round(float(np.mean([r for r, _ in rows])), 4),
                                                 "ndcg@5": round(float(np.mean([n for _, n in rows])), 4)}
    out["questions_corrected"] = {"flat": sum(c.changed for c in flat_fixed), "oracle": sum(c.changed for c in oracle_fixed), "of": len(texts),
                                  "as_written_flat": sum(c.changed for c in clean_fixed["flat"]), "as_written_oracle": sum(c.changed for c in clean_fixed["oracle"])}
    out["how"] = f"seeded letter typos at {TYPO_RATE} (routing.ml.charview.typo_copies); hybrid search; correction by knowledge.ml.spelling"
    for mode in ("flat", "oracle"):
        say(f"  typo10 {mode:6s} hybrid nDCG@5: as written {out[mode]['as_written']['ndcg@5']:.3f} (corrected {out[mode]['as_written_corrected']['ndcg@5']:.3f}), "
            f"with typos {out[mode]['typos']['ndcg@5']:.3f} (corrected {out[mode]['typos_corrected']['ndcg@5']:.3f})")
    return out


def split_rows(queries: list[dict[str, Any]], y: np.ndarray, gold: dict[str, set[str]]) -> tuple[list[int], list[int], list[int], dict[str, Any]]:
    """(train, val, test, validation note): val is the dataset's, or a seeded stratified share of train when it has none."""
    splits = np.array([str(q.get("split") or "") for q in queries])
    known = y >= 0
    train_mask = (splits == "train") & known
    val_mask = (splits == "val") & known
    carved = not val_mask.any()
    if carved:
        val_mask = carve_validation(list(y), train_mask, VAL_SHARE, SEED)
        train_mask &= ~val_mask
    test = [i for i in np.flatnonzero((splits == "test") & known) if gold.get(queries[i]["query_id"])]
    return [int(i) for i in np.flatnonzero(train_mask)], [int(i) for i in np.flatnonzero(val_mask)], [int(i) for i in test], validation_note(carved, VAL_SHARE, SEED)


class _Searcher:
    """Runs a question through the serving search for one plan, and scores the ranked units against gold."""

    def __init__(self, store: EmbeddedQdrantStore, queries: list[dict[str, Any]], qx: np.ndarray, context_means: np.ndarray, gold: dict[str, set[str]]):
        self.store, self.queries, self.qx, self.context_means, self.gold = store, queries, qx, context_means, gold

    def query(self, i: int, context_weight: float = 0.0) -> tuple[list[float], list[int], list[float]]:
        """(dense, sparse indices, sparse values) of query ``i``, expanded with ``context_weight`` of all its user turns."""
        turns = user_turns(self.queries[i])
        context = SearchContext(turns=tuple(turns), vectors=self.context_means[i : i + 1], weight=context_weight) if context_weight and turns else None
        return self.expand(i, context)

    def expand(self, i: int, context: SearchContext | None) -> tuple[list[float], list[int], list[float]]:
        """Query ``i`` widened with ``context`` as serving's search widens it (``knowledge.ml.conversation``)."""
        dense, indices, values = expand_query(self.qx[i], *bm25_vector(self.queries[i]["text"], query=True), context)
        return dense.tolist(), indices, values

    def score(self, i: int, plan: dict[str, float], query: tuple[list[float], list[int], list[float]], method: str) -> tuple[float, float]:
        hits = search_collections(self.store, plan, *query, limit=CHUNKS_PER_QUERY, method=method)
        ranked = _dedupe([h.payload["unit"] for h in hits])
        relevant = self.gold[self.queries[i]["query_id"]]
        return recall_at_k(ranked, relevant), ndcg_at_k(ranked, relevant)


def _choose_query_weight(searcher: _Searcher, rows: list[int], plan: dict[str, float]) -> tuple[float, dict[str, float]]:
    """``μ`` of ``flat_context``: the grid weight with the best hybrid nDCG@5 of the flat search on val (ties: the smaller)."""
    scores = {}
    for weight in CONTEXT_WEIGHTS:
        scores[weight] = float(np.mean([searcher.score(i, plan, searcher.query(i, weight), "hybrid")[1] for i in rows])) if rows else 0.0
    best = max(CONTEXT_WEIGHTS, key=lambda w: (round(scores[w], 4), -w))
    return best, {str(w): round(s, 4) for w, s in scores.items()}


def evaluate_retrieval(dataset: Path, passages: bool = False, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Recall@5 and nDCG@5 of flat, oracle and routed retrieval for dense, sparse and hybrid search.

    Returns ``{mode: {method: {"recall@5": x, "ndcg@5": y}}}`` for every mode of the module
    docstring, plus ``index_s`` (building every domain's collection), ``search_p50_ms`` (one
    routed top-2 hybrid search, query embedding excluded), the router's figures under ``router``,
    ``validation`` (where the val rows came from), ``by_turn`` (each mode's hybrid figures on the
    conversation openers and on the follow-ups apart) and ``setup``.
    """
    from django.conf import settings

    dataset = Path(dataset)
    model = settings.EMBEDDING_MODEL
    encoding = {"threads": max(1, settings.TORCH_THREADS), "batch_size": 64}
    qrels_file = "qrels_passages.jsonl" if passages else "qrels.jsonl"
    gold: dict[str, set[str]] = defaultdict(set)
    for row in read_jsonl(dataset / qrels_file):
        gold[row["query_id"]].add(row["doc_id"])
    index = build_domain_index(dataset, passages, say, "retrieval-eval-")
    _units, domains, chunks, store, index_s, size, overlap = index.units, index.domains, index.chunks, index.store, index.index_s, index.size, index.overlap
    queries, qx = dataset_embeddings(dataset, model, say, **encoding)
    # The user's own earlier turns only: the product never stores the agent's answers.
    turn_texts = sorted({t for q in queries for t in user_turns(q)})
    turn_vectors = dict(zip(turn_texts, cached_embeddings(f"{dataset.name}-user-turns", turn_texts, model, say, **encoding), strict=True)) if turn_texts else {}
    context_means, has_context = _context_vectors(queries, turn_vectors, qx.shape[1])

    # --- splits and the choices made on validation -----------------------------------------------
    y = np.array([domains.index(q["domain"]) if q.get("domain") in domains else -1 for q in queries])
    train, val, test, validation = split_rows(queries, y, gold)
    say(f"  train {len(train)}, val {len(val)} ({validation['source']}), test {len(test)} with gold")
    names = [f"eval_{d}" for d in domains]
    flat_plan = dict.fromkeys(names, 1.0)
    searcher = _Searcher(store, queries, qx, context_means, gold)
    val_with_gold = [i for i in val if gold.get(queries[i]["query_id"])]
    query_weight, query_weight_scores = _choose_query_weight(searcher, val_with_gold, flat_plan) if turn_vectors else (0.0, {})
    say(f"  retrieval query's conversation weight μ = {query_weight} (val flat hybrid nDCG@5 by μ: {query_weight_scores})")

    # --- routers -------------------------------------------------------------------------------
    routers: dict[str, np.ndarray] = {}
    router_report: dict[str, Any] = {"context": "the user's earlier turns only (agent turns never read)"}
    # The product's routing as served (the routed modes): its router, an unsure follow-up ranked with its earlier turns.
    routes = product_routes(dataset, queries, qx, test, domains, model, say, SEED, encoding)
    routers["product"], router_report["product"] = routes.probs, routes.report
    # Who serving would ask first (the conversation's expert kept, none when it abstains without one), not the most probable.
    router_report["product"]["test_served_first_accuracy"] = round(float(np.mean([bool(routes.served.get(i)) and routes.served[i][0] == y[i]
                                                                                  for i in test])), 4) if test else None
    main = "product"
    # A RouterNet on the question alone (routing.ml.training.train_router): the question-only yardstick.
    probs, router_report["text_only"] = _train_router(qx, np.maximum(y, 0), train, val, len(domains), "text_only", say)
    routers["text_only"] = probs
    # The product's question-only routing: its text router, and the same with the experts' documents as evidence.
    text_probs, text_scores, text_metrics = _train_text_router(queries, qx, np.maximum(y, 0), train, val, len(domains), dataset.name, say)
    routers["text_router"] = text_probs
    routers["knowledge"], router_report["knowledge"] = _with_knowledge(store, names, queries, qx, text_probs, text_scores, y, val)
    router_report["text_router"] = text_metrics
    documents = [u.get("text") or "" for u in read_jsonl(dataset / "docs.jsonl")]
    fast_vectors, fast_probs, router_report["fast"] = fast_tier_vectors(queries, qx, np.maximum(y, 0), train, val, len(domains),
                                                                        settings.EMBEDDING_MODEL, documents, dataset.name, SEED, say)
    if fast_probs is not None:
        routers["fast"] = fast_probs
    for key in [k for k in ("product", "text_only", "text_router", "knowledge", "fast") if k in routers]:
        order = np.argsort(-routers[key][test], axis=1)
        router_report[key]["test_accuracy"] = round(float(np.mean(order[:, 0] == y[test])), 4)
        router_report[key]["test_top2_accuracy"] = round(float(np.mean((order[:, :2] == y[test][:, None]).any(axis=1))), 4)
        say(f"  router ({key}): test accuracy {router_report[key]['test_accuracy']:.3f}, top-2 {router_report[key]['test_top2_accuracy']:.3f}")

    # --- searches ------------------------------------------------------------------------------
    threshold = widen_below()
    product_contexts = search_contexts(dataset, queries, model, context_weight(), say, **encoding)
    searched_alone = {i for i in test if i in routes.abstained and product_contexts[i] is not None}
    for i in searched_alone:
        product_contexts[i] = None  # serving searches a follow-up its router abstains on as asked

    def routed(probs: np.ndarray, i: int, k: int, served: list[int] | None = None, widened: bool = False) -> dict[str, float]:
        """The top ``k`` experts' weights: in serving's order where ``served`` says it (the product's routes; [] = no expert
        answers, nothing is searched), else by probability; ``widened``: the search reads the conversation, as serving weighs it."""
        if served == []:
            return {}
        order = list(served) if served else list(np.argsort(-probs[i]))
        return routing_weights([names[j] for j in order[:k]], [float(probs[i][j]) for j in order[:k]], names, threshold,
                               power=weight_power(widened))

    def plans(i: int) -> dict[str, tuple[dict[str, float], str]]:
        """Each mode's collection weights, and its retrieval query: the question's ("plain"), widened as serving
        widens a follow-up's ("product", ``knowledge.ml.conversation.CONTEXT_WEIGHT``), or by the yardstick's ``μ`` ("yardstick")."""
        out = {"flat": (flat_plan, "plain"), "oracle": ({names[y[i]]: 1.0}, "plain")}
        for k in (1, 2):
            out[f"routed_top{k}"] = (routed(routers[main], i, k, routes.served.get(i), widens(product_contexts[i])), "product")
            out[f"routed_top{k}_question_search"] = (routed(routers[main], i, k, routes.served.get(i)), "plain")
            out[f"routed_question_only_top{k}"] = (routed(routers["text_only"], i, k), "plain")
            out[f"routed_text_router_top{k}"] = (routed(routers["text_router"], i, k), "plain")
            out[f"routed_knowledge_top{k}"] = (routed(routers["knowledge"], i, k), "plain")
            out[f"routed_top{k}_text_only"] = out[f"routed_question_only_top{k}"]  # the earlier name, kept for scripts
        if "fast" in routers:
            out["routed_fast_top1"] = (routed(routers["fast"], i, 1), "plain")  # auto:fast: searched with the fast tier's vector (below)
        if turn_vectors:
            out["flat_context"] = (flat_plan, "yardstick")
            out["oracle_context"] = ({names[y[i]]: 1.0}, "yardstick")
        return out

    scores: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    latencies: list[float] = []
    say(f"  searching {len(test):,} test questions ({main} router for the routed modes)")
    for i in test:
        built = {"plain": searcher.query(i), "yardstick": searcher.query(i, query_weight), "product": searcher.expand(i, product_contexts[i])}
        fast_query = (fast_vectors[i].tolist(), built["plain"][1], built["plain"][2]) if fast_vectors is not None else built["plain"]
        for mode, (plan, query) in plans(i).items():
            for method in METHODS:
                t0 = time.perf_counter()
                # An empty plan: the product would answer "No expert covers this question" and search nothing.
                figures = searcher.score(i, plan, fast_query if mode == "routed_fast_top1" else built[query], method) if plan else (0.0, 0.0)
                if mode == "routed_top2" and method == "hybrid" and plan:
                    latencies.append((time.perf_counter() - t0) * 1000)
                scores[mode][method].append(figures)
    typo10 = _typo_report(index, queries, qx, test, y, gold, dataset.name, say)
    index.close()

    report: dict[str, Any] = {"typo10": typo10}
    for mode, methods in scores.items():
        report[mode] = {
            method: {"recall@5": round(float(np.mean([r for r, _ in rows])), 4), "ndcg@5": round(float(np.mean([n for _, n in rows])), 4)}
            for method, rows in methods.items()
        }
    # Openers are searched with the question alone in every mode that serves them; follow-ups are where the
    # conversation matters. Each mode's hybrid figures on each part, so the question-only modes can be read
    # on the questions the product really searches that way.
    follow_up = has_context[test] if test else np.zeros(0, dtype=bool)
    report["by_turn"] = {
        part: {"questions": int(mask.sum()), **{
            mode: {"recall@5": round(float(np.mean([r for (r, _), m in zip(methods["hybrid"], mask, strict=True) if m])), 4),
                   "ndcg@5": round(float(np.mean([n for (_, n), m in zip(methods["hybrid"], mask, strict=True) if m])), 4)}
            for mode, methods in scores.items()}}
        for part, mask in (("opener", ~follow_up), ("follow_up", follow_up)) if mask.any()
    }
    report["index_s"] = round(index_s, 2)
    report["search_p50_ms"] = round(statistics.median(latencies), 3) if latencies else None
    flat, oracle, routed_ndcg = (report[m]["hybrid"]["ndcg@5"] for m in ("flat", "oracle", "routed_top2"))
    report["router"] = router_report
    report["validation"] = validation
    report["setup"] = {
        "dataset": dataset.name, "level": "passage" if passages else "document", "test_questions": len(test), "chunks": len(chunks),
        "test_questions_with_user_context": int(has_context[test].sum()) if test else 0,
        "chunk_size": size, "chunk_overlap": overlap, "embedding_model": model, "widen_below": threshold, "weight_power": weight_power(), "context_weight_power": weight_power(widened=True), "chunks_per_search": CHUNKS_PER_QUERY,
        "hybrid_ndcg_gap_captured_by_routed_top2": round((routed_ndcg - flat) / (oracle - flat), 3) if oracle != flat else None,
        # Issue 19's target: question-only routing (better of top-1 and top-2) with the experts' documents as evidence.
        "hybrid_ndcg_gap_captured_by_question_only_knowledge": round(
            (max(report[f"routed_knowledge_top{k}"]["hybrid"]["ndcg@5"] for k in (1, 2)) - flat) / (oracle - flat), 3) if oracle != flat else None,
        "bm25_reference_recall_ndcg": BM25_REFERENCE if not passages else None,
        "query_context_weight": query_weight, "query_context_weight_val_ndcg": query_weight_scores,
        "query_context_weight_chosen_on": "val (flat_context hybrid nDCG@5)",
        "product_path": "routed_top1/routed_top2: router reads question + user turns, retrieval the question widened with the user's turns "
                        "(knowledge.ml.conversation.CONTEXT_WEIGHT), alone where the product's router abstains",
        "follow_ups_searched_alone": len(searched_alone),
    }
    shown = ("flat", "oracle", "routed_top1", "routed_top2", "routed_question_only_top2", "routed_text_router_top2", "routed_knowledge_top1",
             "routed_knowledge_top2", "routed_fast_top1", "flat_context", "oracle_context")
    for mode in [m for m in shown if m in report]:
        line = "  ".join(f"{m} {report[mode][m]['recall@5']:.3f}/{report[mode][m]['ndcg@5']:.3f}" for m in METHODS)
        say(f"  {mode:26s} (recall@5/nDCG@5)  {line}")
    for part, figures in report["by_turn"].items():
        line = "  ".join(f"{m} {figures[m]['ndcg@5']:.3f}" for m in shown if m in figures)
        say(f"  {part}s ({figures['questions']:,}), hybrid nDCG@5: {line}")
    return report
