"""``manage.py evaluate retrieval``: what the chat path retrieves, flat vs oracle vs routed, replayed through the product.

The dataset is loaded as a team would load it (``--passages``: passages as documents, judged with
``qrels_passages.jsonl``) and every test question is asked through the chat path; its ranking is the
documents of the retrieved passages, judged against the qrels. Arms: ``flat`` (one expert holding
everything), ``oracle`` (the gold expert), ``routed_top1`` (``auto:fast``) and ``routed_top2``
(``auto``), reported under ``hybrid``; ``paired`` holds routed minus flat, ``cost`` the latency.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.scoring import scored
from evaluation.workspace import Dataset, Say, ask, load
from experts.ml.answer_metrics import paired_difference

K = 5
ARMS = {"flat": None, "oracle": None, "routed_top1": "auto:fast", "routed_top2": "auto"}
# BM25 on the same files (shared/datasets/README.md): recall@5 / nDCG@5 over one index and the gold agency's alone.
BM25_REFERENCE = {"flat": (0.539, 0.443), "oracle": (0.602, 0.491)}


def ndcg_at_k(ranked: list[str], gold: set[str], k: int = K) -> float:
    """Binary-relevance nDCG@k."""
    dcg = sum(1.0 / np.log2(i + 2) for i, unit in enumerate(ranked[:k]) if unit in gold)
    ideal = sum(1.0 / np.log2(i + 2) for i in range(min(len(gold), k)))
    return float(dcg / ideal) if ideal else 0.0


def recall_at_k(ranked: list[str], gold: set[str], k: int = K) -> float:
    return len(set(ranked[:k]) & gold) / len(gold) if gold else 0.0


def _ranking(documents: list[str]) -> list[str]:
    """The retrieved passages' documents, best first, each once."""
    return list(dict.fromkeys(d for d in documents if d))


def evaluate_retrieval(folder: Path, passages: bool = False, say: Say = print, limit: int | None = None, split: str = "test") -> dict[str, Any]:
    """Replay ``split``'s questions that have qrels through every arm (``val`` to choose a setting); returns the JSON-able report."""
    from knowledge.models import Document

    started = time.perf_counter()
    dataset = Dataset.read(folder, passages=passages)
    questions = [q for q in dataset.questions(split) if dataset.relevant.get(str(q.get("query_id")))]
    if not questions:
        raise ValueError(f"{folder} has no {split} questions with a domain and relevance judgements")
    questions = questions[:limit] if limit else questions
    say(f"{dataset.name}: {len(questions)} {split} questions, {len(dataset.documents):,} {'passages' if passages else 'documents'}")
    loaded = load(dataset, flat=True, say=say)
    external = dict(Document.objects.values_list("pk", "external_id"))
    report: dict[str, Any] = {"pipeline": "product"}
    per_question: dict[str, list[float]] = {}
    follow_up = np.array([bool(q.get("context")) for q in questions])
    for arm, model in ARMS.items():
        t0 = time.perf_counter()
        ndcg, recall, retrieve_ms, gold_expert, refused = [], [], [], [], []
        for q in questions:
            named = model or (loaded.flat if arm == "flat" else loaded.experts[q["domain"]])
            got = scored(ask(q, named, loaded.scope(named)), q, external, loaded.experts[q["domain"]])
            gold, ranked = dataset.relevant[str(q["query_id"])], _ranking(got.documents)
            ndcg.append(ndcg_at_k(ranked, gold))
            recall.append(recall_at_k(ranked, gold))
            retrieve_ms.append(got.retrieve_ms)
            gold_expert.append(got.expert == got.gold_expert)
            refused.append(not got.documents)  # no expert answered (the router placed the question with none): nothing retrieved
        per_question[arm] = ndcg
        report[arm] = {"hybrid": {"ndcg@5": round(float(np.mean(ndcg)), 4), "recall@5": round(float(np.mean(recall)), 4)},
                       "retrieve_p50_ms": round(float(np.median(retrieve_ms)), 1), "answering_expert_is_gold": round(float(np.mean(gold_expert)), 4),
                       # Questions nothing was retrieved for (every one of them is answerable here), and nDCG@5 on the others.
                       "nothing_retrieved": round(float(np.mean(refused)), 4),
                       "ndcg@5_where_retrieved": round(float(np.mean([n for n, r in zip(ndcg, refused, strict=True) if not r])), 4) if not all(refused) else None}
        report[arm]["by_turn"] = {part: round(float(np.mean(np.array(ndcg)[mask])), 4) if mask.any() else None
                                  for part, mask in (("first", ~follow_up), ("follow_up", follow_up))}
        say(f"  {arm:12s} recall@5 {report[arm]['hybrid']['recall@5']:.3f}  nDCG@5 {report[arm]['hybrid']['ndcg@5']:.3f}  "
            f"retrieval p50 {report[arm]['retrieve_p50_ms']} ms  nothing retrieved {report[arm]['nothing_retrieved']:.3f}  ({time.perf_counter() - t0:.0f} s)")
    report["paired"] = {}
    for arm in ("routed_top1", "routed_top2", "oracle"):
        mean, se = paired_difference(per_question[arm], per_question["flat"])
        report["paired"][f"{arm} - flat"] = {"ndcg@5": round(mean, 4), "se": None if se is None else round(se, 4), "n": len(questions)}
    flat, oracle = report["flat"]["hybrid"]["ndcg@5"], report["oracle"]["hybrid"]["ndcg@5"]
    report["router"] = {"version": loaded.router_version, "val_accuracy": loaded.router_metrics.get("val", {}).get("accuracy")}
    report["workspace"] = loaded.seconds
    report["setup"] = {
        "dataset": dataset.name, "split": split, "level": "passage" if passages else "document", "test_questions": len(questions),
        "test_questions_with_user_context": int(follow_up.sum()), "passages_per_question": "RETRIEVAL_TOP_K",
        "hybrid_ndcg_gap_captured_by_routed_top2": round((report["routed_top2"]["hybrid"]["ndcg@5"] - flat) / (oracle - flat), 3) if oracle != flat else None,
        "bm25_reference": BM25_REFERENCE if dataset.name == "doc2dial" and not passages else None,
    }
    report["wall_s"] = round(time.perf_counter() - started, 1)
    return report
