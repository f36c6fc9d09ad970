"""``manage.py evaluate retrieval``: flat vs oracle vs routed retrieval, dense / sparse / hybrid.

The dataset's documents (``docs.jsonl``, or ``passages.jsonl`` with ``--passages``) are chunked as
an expert's documents are (the Expert defaults: 1000 characters, 150 overlap) and indexed into one
collection per domain in a temporary ``EmbeddedQdrantStore`` (never the app's store or database).
Queries are the test split's user turns (``text``, not ``context``); gold comes from
``qrels.jsonl`` / ``qrels_passages.jsonl``. A document counts as retrieved when any of its chunks
is in the top 5 after chunks are deduplicated by document.

Modes, all through the serving code's search (``knowledge.services.search_collections``):

* ``flat``: one search over every domain's collection as one (global ranks, IDF over all).
* ``oracle``: the gold domain's collection alone (a perfect, hard router).
* ``routed_top1`` / ``routed_top2``: the router's first one or two domains weighted by its
  probabilities, widened to every domain with the probability left over when the chosen ones hold
  less than ``RETRIEVAL_WIDEN_BELOW`` (``knowledge.services.routing_weights``), i.e. what
  ``search_experts`` does for the ``auto:fast`` and ``auto`` chat modes.

The router is a ``RouterNet`` trained with ``train_router`` on the train split (early stopping on
the val split). Its input is the question's embedding plus ``λ`` times the mean embedding of the
conversation's earlier turns (zero for a first turn), with ``λ`` chosen on the val split from a
small grid by a logistic regression's accuracy (cheap, and the choice is the data's, not ours).
The retrieval query never sees the conversation. The same modes are also reported for a router
that reads the question alone (``*_text_only``), which is the weaker, 72%-accurate setting that
MEASURED.md describes.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.datasets import cached_embeddings, dataset_embeddings, embedding_cache_dir, read_jsonl
from experts.models import Expert
from knowledge.ml.chunking import chunk_text
from knowledge.ml.sparse import bm25_vector
from knowledge.services import embedding_text, routing_weights, search_collections, sparse_text, widen_below
from knowledge.stores.base import PointRecord
from knowledge.stores.qdrant import EmbeddedQdrantStore

K = 5
CHUNKS_PER_QUERY = 20  # chunks fetched before deduplicating by document and cutting at K
CONTEXT_WEIGHTS = (0.0, 0.5, 1.0, 2.0, 4.0)
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


def _conversation_features(queries: list[dict[str, Any]], qx: np.ndarray, turn_vectors: dict[str, np.ndarray], weight: float) -> np.ndarray:
    """Question embedding + ``weight`` times the mean embedding of the earlier turns, L2-normalised."""
    out = qx.copy()
    if weight:
        for i, query in enumerate(queries):
            turns = [turn_vectors[t["text"]] for t in query.get("context") or [] if t.get("text") in turn_vectors]
            if turns:
                out[i] = qx[i] + weight * np.mean(turns, axis=0)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _train_router(x: np.ndarray, y: np.ndarray, train: list[int], val: list[int], n: int, key: str, say: Callable[[str], None]) -> tuple[np.ndarray, dict[str, Any]]:
    """RouterNet probabilities for every row (cached by the inputs' hash: training takes minutes on a shared CPU)."""
    from routing.ml.training import TrainConfig, predict_proba, train_router

    digest = hashlib.sha256(x.tobytes() + y.tobytes() + json.dumps([train, val, n, key]).encode()).hexdigest()[:16]
    path = embedding_cache_dir().parent / "retrieval" / f"router-{digest}.npz"
    if path.exists():
        cached = np.load(path, allow_pickle=False)
        return cached["probs"], json.loads(str(cached["metrics"]))
    t0 = time.perf_counter()
    result = train_router(x[train], y[train], x[val], y[val], n, {}, TrainConfig(device="cpu", seed=0))
    probs = predict_proba(result.model, x)
    metrics = {"val_accuracy": round(result.metrics["val"]["accuracy"], 4), "epochs": result.metrics["epochs_run"], "train_s": round(time.perf_counter() - t0, 1)}
    say(f"  router ({key}): val accuracy {metrics['val_accuracy']:.3f} after {metrics['epochs']} epochs, {metrics['train_s']} s")
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, probs=probs, metrics=np.array(json.dumps(metrics)))
    return probs, metrics


def _choose_context_weight(queries: list[dict[str, Any]], qx: np.ndarray, turns: dict[str, np.ndarray], y: np.ndarray, train: list[int], val: list[int]) -> tuple[float, dict[str, float]]:
    from sklearn.linear_model import LogisticRegression

    scores = {}
    for weight in CONTEXT_WEIGHTS:
        x = _conversation_features(queries, qx, turns, weight)
        model = LogisticRegression(max_iter=2000).fit(x[train], y[train])
        scores[weight] = float(model.score(x[val], y[val]))
    best = max(CONTEXT_WEIGHTS, key=lambda w: (round(scores[w], 4), -w))
    return best, {str(w): round(s, 4) for w, s in scores.items()}


def evaluate_retrieval(dataset: Path, passages: bool = False, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Recall@5 and nDCG@5 of flat, oracle and routed retrieval for dense, sparse and hybrid search.

    Returns ``{mode: {method: {"recall@5": x, "ndcg@5": y}}}`` plus ``index_s`` (building every
    domain's collection), ``search_p50_ms`` (one routed top-2 hybrid search, query embedding
    excluded), and the router's figures under ``router``.
    """
    from django.conf import settings

    dataset = Path(dataset)
    model = settings.EMBEDDING_MODEL
    encoding = {"threads": max(1, settings.TORCH_THREADS), "batch_size": 64}
    units_file, qrels_file = ("passages.jsonl", "qrels_passages.jsonl") if passages else ("docs.jsonl", "qrels.jsonl")
    units = read_jsonl(dataset / units_file)
    gold: dict[str, set[str]] = defaultdict(set)
    for row in read_jsonl(dataset / qrels_file):
        gold[row["query_id"]].add(row["doc_id"])
    domains = sorted({u["domain"] for u in units})
    size = int(Expert._meta.get_field("chunk_size").default)
    overlap = int(Expert._meta.get_field("chunk_overlap").default)
    say(f"{dataset.name}: {len(units):,} {'passages' if passages else 'documents'} in {len(domains)} domains, chunks of {size}/{overlap}")

    chunks: list[tuple[int, str]] = []  # (unit index, chunk text)
    for i, unit in enumerate(units):
        for chunk in chunk_text(unit["text"], size=size, overlap=overlap):
            chunks.append((i, chunk.text))
    name = dataset.name + ("-passages" if passages else "")
    chunk_texts = [embedding_text(units[i]["title"], text) for i, text in chunks]
    cx = cached_embeddings(f"{name}-chunks-{size}-{overlap}", chunk_texts, model, say, **encoding)
    queries, qx = dataset_embeddings(dataset, model, say, **encoding)
    turn_texts = sorted({t["text"] for q in queries for t in q.get("context") or [] if t.get("text")})
    turn_vectors = dict(zip(turn_texts, cached_embeddings(f"{dataset.name}-turns", turn_texts, model, say, **encoding), strict=True)) if turn_texts else {}

    # --- one collection per domain -------------------------------------------------------------
    by_domain: dict[str, list[PointRecord]] = defaultdict(list)
    for row, (i, text) in enumerate(chunks):
        unit = units[i]
        indices, values = bm25_vector(sparse_text(unit["title"], text))
        by_domain[unit["domain"]].append(PointRecord(
            id=hashlib.md5(f"{i}:{row}".encode()).hexdigest(), dense=cx[row].tolist(), sparse_indices=indices, sparse_values=values,
            payload={"document_id": i, "unit": unit["doc_id"], "domain": unit["domain"]},
        ))
    root = tempfile.mkdtemp(prefix="retrieval-eval-")
    store = EmbeddedQdrantStore(root)
    t0 = time.perf_counter()
    for domain in domains:
        store.rebuild(f"eval_{domain}", cx.shape[1], by_domain[domain])
    index_s = time.perf_counter() - t0
    say(f"  indexed {len(chunks):,} chunks into {len(domains)} collections in {index_s:.1f} s")

    # --- routers -------------------------------------------------------------------------------
    y = np.array([domains.index(q["domain"]) if q.get("domain") in domains else -1 for q in queries])
    train = [i for i, q in enumerate(queries) if q.get("split") == "train" and y[i] >= 0]
    val = [i for i, q in enumerate(queries) if q.get("split") == "val" and y[i] >= 0]
    test = [i for i, q in enumerate(queries) if q.get("split") == "test" and y[i] >= 0 and gold.get(q["query_id"])]
    weight, weight_scores = _choose_context_weight(queries, qx, turn_vectors, y, train, val) if turn_vectors else (0.0, {})
    say(f"  conversation weight λ = {weight} (val accuracy by λ: {weight_scores})")
    routers: dict[str, np.ndarray] = {}
    router_report: dict[str, Any] = {"kind": "RouterNet (routing.ml.training.train_router)", "context_weight": weight, "context_weight_val_accuracy": weight_scores}
    for key, feats in (("conversation", _conversation_features(queries, qx, turn_vectors, weight)), ("text_only", qx)):
        if key == "conversation" and not weight:
            continue
        probs, metrics = _train_router(feats, np.maximum(y, 0), train, val, len(domains), key, say)
        order = np.argsort(-probs[test], axis=1)
        metrics["test_accuracy"] = round(float(np.mean(order[:, 0] == y[test])), 4)
        metrics["test_top2_accuracy"] = round(float(np.mean((order[:, :2] == y[test][:, None]).any(axis=1))), 4)
        say(f"  router ({key}): test accuracy {metrics['test_accuracy']:.3f}, top-2 {metrics['test_top2_accuracy']:.3f}")
        routers[key] = probs
        router_report[key] = metrics
    main = "conversation" if "conversation" in routers else "text_only"

    # --- searches ------------------------------------------------------------------------------
    names = [f"eval_{d}" for d in domains]
    threshold = widen_below()

    def plans(i: int) -> dict[str, dict[str, float]]:
        out = {"flat": dict.fromkeys(names, 1.0), "oracle": {names[y[i]]: 1.0}}
        for key, probs in routers.items():
            suffix = "" if key == main else f"_{key}"
            order = list(np.argsort(-probs[i]))
            for k in (1, 2):
                chosen = [names[j] for j in order[:k]]
                out[f"routed_top{k}{suffix}"] = routing_weights(chosen, [float(probs[i][j]) for j in order[:k]], names, threshold)
        return out

    scores: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    latencies: list[float] = []
    say(f"  searching {len(test):,} test questions ({main} router for the routed modes)")
    for i in test:
        question = queries[i]["text"]
        indices, values = bm25_vector(question, query=True)
        dense = qx[i].tolist()
        relevant = gold[queries[i]["query_id"]]
        for mode, plan in plans(i).items():
            for method in METHODS:
                t0 = time.perf_counter()
                hits = search_collections(store, plan, dense, indices, values, limit=CHUNKS_PER_QUERY, method=method)
                if mode == "routed_top2" and method == "hybrid":
                    latencies.append((time.perf_counter() - t0) * 1000)
                ranked = _dedupe([h.payload["unit"] for h in hits])
                scores[mode][method].append((recall_at_k(ranked, relevant), ndcg_at_k(ranked, relevant)))
    store.close()
    import shutil

    shutil.rmtree(root, ignore_errors=True)

    report: dict[str, Any] = {}
    for mode, methods in scores.items():
        report[mode] = {
            method: {"recall@5": round(float(np.mean([r for r, _ in rows])), 4), "ndcg@5": round(float(np.mean([n for _, n in rows])), 4)}
            for method, rows in methods.items()
        }
    report["index_s"] = round(index_s, 2)
    report["search_p50_ms"] = round(statistics.median(latencies), 3) if latencies else None
    flat, oracle, routed = (report[m]["hybrid"]["ndcg@5"] for m in ("flat", "oracle", "routed_top2"))
    report["router"] = router_report
    report["setup"] = {
        "dataset": dataset.name, "level": "passage" if passages else "document", "test_questions": len(test), "chunks": len(chunks),
        "chunk_size": size, "chunk_overlap": overlap, "embedding_model": model, "widen_below": threshold, "chunks_per_search": CHUNKS_PER_QUERY,
        "hybrid_ndcg_gap_captured_by_routed_top2": round((routed - flat) / (oracle - flat), 3) if oracle != flat else None,
        "bm25_reference_recall_ndcg": BM25_REFERENCE if not passages else None,
    }
    for mode in ("flat", "oracle", "routed_top1", "routed_top2"):
        line = "  ".join(f"{m} {report[mode][m]['recall@5']:.3f}/{report[mode][m]['ndcg@5']:.3f}" for m in METHODS)
        say(f"  {mode:12s} (recall@5/nDCG@5)  {line}")
    return report
