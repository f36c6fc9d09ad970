"""How often an off-topic question asked mid-conversation is answered "not found", by ``knowledge.ml.conversation.CONTEXT_WEIGHT``.

A follow-up is searched with the user's earlier turns (``knowledge.ml.conversation``), and the
extractive answer's "not found" gate (``EXTRACTIVE_MIN_SCORE``) reads the best passage's similarity
to that widened query. The more the conversation weighs, the more an off-topic question ("What's the
weather tomorrow?" in a DMV conversation) finds passages that pass the gate. Serving therefore leaves
the conversation out of the search when the router abstains on the question (``serving.chat``:
``_search_context``; the in-scope score reads the question alone), and searches it as asked.

This script measures both on the dataset's follow-ups: every follow-up of ``--split`` (a user turn with
earlier user turns) keeps its conversation, and its question is replaced by an out-of-scope question of
clinc150 of the same split (seeded draw). As serving does (``serving.chat``: a follow-up the router
places nowhere stays with the conversation's expert, a stored conversation's or, for a request that
sends its messages, the one its earlier questions route to), the conversation's own domain's
collection is searched, through the product's search (``evaluation.answers_corpus.search_passages``, the index
``evaluate answers`` builds). The router is the product's (``train_text_router`` with the default
variant, as ``evaluate router`` trains it, on the dataset's train split, calibrated on its validation
split; with the experts' documents as evidence when ``ROUTER_KNOWLEDGE`` is on, as training fits it).
Reported per weight: the share of off-topic follow-ups answered "not found" (higher is honest) and, for
the real follow-ups, the share turned away among those whose passages hold the gold answer (lower is
better), as served (``off_topic_not_found``, ``answerable_turned_away``) and with the conversation
always in the search (``..._always_widened``: serving before the router's say), and how many of each
the router abstained on. ``CONTEXT_WEIGHT``'s comment quotes this script's figures. Run from
the repository root (a few minutes on a CPU; embeddings are cached):

    PYTHONPATH=platform:. DJANGO_SETTINGS_MODULE=switchboard.settings python tools/measure_offtopic_followups.py [--weights 0,0.25,0.5,0.75] [--split val]
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
    parser.add_argument("--oos", default="../shared/datasets/clinc150/queries.jsonl", help="queries whose split is 'oos' (those of --split are used)")
    parser.add_argument("--split", default="val", choices=["val", "test"], help="whose follow-ups and out-of-scope questions (choose on val, report test)")
    parser.add_argument("--weights", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    django.setup()
    from django.conf import settings

    from evaluation.abstentions import ProductRouter
    from evaluation.answers_corpus import index_corpus, search_passages
    from evaluation.datasets import cached_embeddings, dataset_embeddings, read_jsonl, search_contexts
    from experts.ml.answer_metrics import support
    from experts.ml.targets import MIN_SUPPORT

    dataset, model, encoding = Path(args.dataset), settings.EMBEDDING_MODEL, {"threads": max(1, settings.TORCH_THREADS), "batch_size": 64}
    gate = float(settings.EXTRACTIVE_MIN_SCORE)
    off_topic = [r for r in read_jsonl(Path(args.oos)) if r.get("split") == "oos" and r.get("orig_split") == args.split and r.get("text")]
    if not off_topic:
        raise SystemExit(f"{args.oos} holds no out-of-scope {args.split} questions (split 'oos', orig_split {args.split!r})")
    ox = cached_embeddings(f"{Path(args.oos).parent.name}-oos-{args.split}-texts", [r["text"] for r in off_topic], model, **encoding)
    corpus = index_corpus(dataset, read_jsonl(dataset / "docs.jsonl"), print, encoding)
    queries, qx = dataset_embeddings(dataset, model, **encoding)
    report: dict[str, dict[str, float]] = {}
    try:
        contexts = search_contexts(dataset, queries, model, 1.0, **encoding)  # each record's earlier turns (the weight is set below)
        rows = [i for i, q in enumerate(queries) if q.get("split") == args.split and contexts[i] is not None and q.get("domain") in corpus.domains
                and q.get("answer")]
        draw = np.random.default_rng(SEED).integers(len(off_topic), size=len(rows))
        abstentions = ProductRouter(dataset, queries, qx, model, print, SEED)
        try:
            real_abstains = abstentions(qx[rows], [queries[i]["text"] for i in rows])
            off_abstains = abstentions(ox[draw], [off_topic[int(j)]["text"] for j in draw])
        finally:
            abstentions.close()
        print(f"the router abstains on {real_abstains.mean():.3f} of the real follow-ups and {off_abstains.mean():.3f} of the off-topic ones")
        for weight in [float(w) for w in args.weights.split(",")]:
            refused, refused_always, turned_away, turned_away_always = [], [], [], []
            for k, (i, j) in enumerate(zip(rows, draw, strict=True)):
                plan = {corpus.names[corpus.domains.index(queries[i]["domain"])]: 1.0}
                context = dataclasses.replace(contexts[i], weight=weight) if weight else None

                def not_found(vector: np.ndarray, text: str, widened: bool, plan: dict = plan, context: object = context) -> tuple[bool, list]:
                    found = search_passages(corpus, plan, vector, text, int(settings.RETRIEVAL_TOP_K), context if widened else None)
                    return max((p.score for p in found[:3]), default=0.0) < gate, found

                always, own = not_found(qx[i], queries[i]["text"], True)
                if any(support(str(queries[i]["answer"]), p.text) >= MIN_SUPPORT for p in own):
                    turned_away_always.append(always)
                    turned_away.append(not_found(qx[i], queries[i]["text"], False)[0] if real_abstains[k] and context else always)
                other = off_topic[int(j)]["text"]
                always = not_found(ox[int(j)], other, True)[0]
                refused_always.append(always)
                refused.append(not_found(ox[int(j)], other, False)[0] if off_abstains[k] and context else always)
            report[str(weight)] = {
                "follow_ups": len(rows), "off_topic_not_found": _share(refused), "off_topic_not_found_always_widened": _share(refused_always),
                "answerable": len(turned_away), "answerable_turned_away": _share(turned_away), "answerable_turned_away_always_widened": _share(turned_away_always),
                "router_abstained_real": _share(list(real_abstains)), "router_abstained_off_topic": _share(list(off_abstains)),
            }
            r = report[str(weight)]
            print(f"weight {weight}: off-topic follow-ups answered 'not found' {r['off_topic_not_found']} (always widened: {r['off_topic_not_found_always_widened']}); "
                  f"answerable follow-ups turned away {r['answerable_turned_away']} (always widened: {r['answerable_turned_away_always_widened']}; of {len(turned_away)})")
    finally:
        corpus.close()
    if args.json:
        Path(args.json).write_text(json.dumps({"gate": gate, "split": args.split, "by_weight": report}, indent=2))


def _share(flags: list) -> float | None:
    return round(float(np.mean(flags)), 3) if flags else None


if __name__ == "__main__":
    main()
