"""How often an off-topic question asked mid-conversation is answered "not found", by ``RETRIEVAL_CONTEXT_WEIGHT``.

A follow-up is searched with the user's earlier turns (``knowledge.ml.conversation``), and the
extractive answer's "not found" gate (``EXTRACTIVE_MIN_SCORE``) reads the best passage's similarity
to that widened query. The more the conversation weighs, the more an off-topic question ("What's the
weather tomorrow?" in a DMV conversation) finds passages that pass the gate. This script measures it
on validation data only: every doc2dial validation follow-up (a user turn with earlier user turns)
keeps its conversation, and its question is replaced by an out-of-scope validation question of
clinc150 (seeded draw). As a sticky conversation does (``serving.chat``: a follow-up the router places
nowhere stays with the conversation's expert), the conversation's own domain's collection is searched,
through the product's search (``evaluation.answers.search_passages``, the index ``evaluate answers``
builds). Reported per weight: the share of off-topic follow-ups answered "not found" (higher is
honest) and, for the real follow-ups, the share turned away among those whose passages hold the gold
answer (lower is better). ``RETRIEVAL_CONTEXT_WEIGHT``'s comment quotes this script's figures. Run from
the repository root (a few minutes on a CPU; embeddings are cached):

    PYTHONPATH=platform:. DJANGO_SETTINGS_MODULE=switchboard.settings python tools/measure_offtopic_followups.py [--weights 0,0.25,0.5,0.75]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import django
import numpy as np

SEED = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="../shared/datasets/doc2dial")
    parser.add_argument("--oos", default="../shared/datasets/clinc150/queries.jsonl", help="queries whose split is 'oos' (their validation ones are used)")
    parser.add_argument("--weights", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    django.setup()
    from django.conf import settings

    from evaluation.answers import index_corpus, search_passages
    from evaluation.datasets import cached_embeddings, dataset_embeddings, read_jsonl, search_contexts
    from experts.ml.answer_metrics import support
    from experts.ml.targets import MIN_SUPPORT

    dataset, model, encoding = Path(args.dataset), settings.EMBEDDING_MODEL, {"threads": max(1, settings.TORCH_THREADS), "batch_size": 64}
    gate = float(settings.EXTRACTIVE_MIN_SCORE)
    off_topic = [r for r in read_jsonl(Path(args.oos)) if r.get("split") == "oos" and r.get("orig_split") == "val" and r.get("text")]
    if not off_topic:
        raise SystemExit(f"{args.oos} holds no out-of-scope validation questions (split 'oos', orig_split 'val')")
    ox = cached_embeddings(f"{Path(args.oos).parent.name}-oos-val-texts", [r["text"] for r in off_topic], model, **encoding)
    corpus = index_corpus(dataset, read_jsonl(dataset / "docs.jsonl"), print, encoding)
    queries, qx = dataset_embeddings(dataset, model, **encoding)
    report: dict[str, dict[str, float]] = {}
    try:
        contexts = search_contexts(dataset, queries, model, 1.0, **encoding)  # each record's earlier turns (the weight is set below)
        rows = [i for i, q in enumerate(queries) if q.get("split") == "val" and contexts[i] is not None and q.get("domain") in corpus.domains
                and q.get("answer")]
        draw = np.random.default_rng(SEED).integers(len(off_topic), size=len(rows))
        for weight in [float(w) for w in args.weights.split(",")]:
            refused, turned_away, answerable = [], [], []
            for i, j in zip(rows, draw, strict=True):
                plan = {corpus.names[corpus.domains.index(queries[i]["domain"])]: 1.0}
                context = dataclasses.replace(contexts[i], weight=weight) if weight else None
                own = search_passages(corpus, plan, qx[i], queries[i]["text"], int(settings.RETRIEVAL_TOP_K), context)
                if any(support(str(queries[i]["answer"]), p.text) >= MIN_SUPPORT for p in own):
                    answerable.append(i)
                    turned_away.append(max((p.score for p in own[:3]), default=0.0) < gate)
                other = search_passages(corpus, plan, ox[int(j)], off_topic[int(j)]["text"], int(settings.RETRIEVAL_TOP_K), context)
                refused.append(max((p.score for p in other[:3]), default=0.0) < gate)
            report[str(weight)] = {"follow_ups": len(rows), "off_topic_not_found": round(float(np.mean(refused)), 3),
                                   "answerable": len(answerable), "answerable_turned_away": round(float(np.mean(turned_away)), 3) if turned_away else None}
            print(f"weight {weight}: off-topic follow-ups answered 'not found' {report[str(weight)]['off_topic_not_found']:.3f}; "
                  f"answerable follow-ups turned away {report[str(weight)]['answerable_turned_away']} (of {len(answerable)})")
    finally:
        corpus.close()
    if args.json:
        Path(args.json).write_text(json.dumps({"gate": gate, "by_weight": report}, indent=2))


if __name__ == "__main__":
    main()
