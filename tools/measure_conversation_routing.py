"""How well the product's router places follow-ups and changes of subject, by ``routing.ml.conversation``'s ``CONTEXT_WEIGHT`` and ``CONTEXT_BELOW``.

Serving ranks a follow-up the router is unsure of alone (best probability under the threshold) again
with the user's earlier questions blended in (``routing.ml.conversation``; abstention still reads the
question alone). Two kinds of question pull the two constants apart:

* real follow-ups: every user turn of ``--split`` with earlier user turns, its conversation as it
  was (doc2dial's conversations stay in one domain); right when the router ranks the gold domain first;
* changes of subject: every conversation opener of ``--split`` asked after the earlier turns of
  another domain's follow-up (5 seeded draws each); right when the opener's own domain comes first.

The router is the product's (``train_text_router``, the default variant, as ``evaluate router``
trains it, on the dataset's train split, calibrated on its validation split; with the documents as
evidence when ``ROUTER_KNOWLEDGE`` is on and validation keeps the combiner). Reported for every pair
on the grid: both accuracies and their mean, stateless (the API with the conversation's messages);
and for the chosen pair and the configured one (the constants), with a stored conversation's stickiness too (``STICKY_MARGIN``;
the conversation's expert taken to be the gold domain of the real follow-ups and the other domain
for the changes of subject); and, at the configured pair, who answers with abstentions counted
(``answering``): a request that sends its messages without the earlier questions' expert (an
abstained question gets no expert), with it (``serving.route.earlier_expert``: kept by the same
margin, and answering an abstained question), and a stored conversation. The chosen pair: the best mean on ``--split`` (choose on val, report
test), ties (to three decimals) to the smaller weight, then the lower threshold. The constants'
module quotes this script's figures. Run from the repository root (a few minutes on a CPU;
embeddings are cached):

    PYTHONPATH=platform:. DJANGO_SETTINGS_MODULE=switchboard.settings python tools/measure_conversation_routing.py [--split val]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import django
import numpy as np

SEED = 0
DRAWS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="../shared/datasets/doc2dial")
    parser.add_argument("--split", default="val", choices=["val", "test"])
    parser.add_argument("--weights", default="1,2,3,4,6")
    parser.add_argument("--below", default="0.5,0.6,0.7,0.8,0.9,1.01", help="thresholds (above 1: every follow-up is blended)")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    django.setup()
    from django.conf import settings

    from evaluation.abstentions import ProductRouter
    from evaluation.datasets import dataset_embeddings, search_contexts
    from routing.ml import conversation as conversation_rule
    from routing.ml.conversation import blend, earlier_vector, unsure, within_question

    dataset, model, encoding = Path(args.dataset), settings.EMBEDDING_MODEL, {"threads": max(1, settings.TORCH_THREADS), "batch_size": 64}
    queries, qx = dataset_embeddings(dataset, model, **encoding)
    contexts = search_contexts(dataset, queries, model, 1.0, **encoding)
    domains = sorted({q["domain"] for q in queries if q.get("split") == "train" and q.get("domain")})
    in_split = [i for i, q in enumerate(queries) if q.get("split") == args.split and q.get("domain") in domains]
    follow_ups = [i for i in in_split if contexts[i] is not None]
    openers = [i for i in in_split if contexts[i] is None]
    if not follow_ups or not openers:
        raise SystemExit(f"{dataset} has no conversations in its {args.split} split (queries with earlier user turns, and openers)")
    rng = np.random.default_rng(SEED)
    domain = {i: queries[i]["domain"] for i in in_split}
    sets = {
        "follow_ups": [(i, i, domains.index(domain[i])) for i in follow_ups],
        "changes_of_subject": [(i, int(j), domains.index(domain[int(j)])) for i in openers
                               for j in rng.choice([j for j in follow_ups if domain[j] != domain[i]], size=DRAWS, replace=False)],
    }
    weights, belows = [float(w) for w in args.weights.split(",")], [float(b) for b in args.below.split(",")]
    abstentions = ProductRouter(dataset, queries, qx, model, print, SEED)
    grid: dict[str, dict[str, float]] = {}
    stickiness: dict[str, dict[str, float]] = {}
    try:
        scorer = abstentions._scorer
        ranked: dict[str, dict[tuple[float, float] | None, np.ndarray]] = {}
        gold: dict[str, np.ndarray] = {}
        placed_by: dict[str, np.ndarray] = {}
        history_expert: dict[str, list[int | None]] = {}
        for name, rows in sets.items():
            vectors = qx[[i for i, _, _ in rows]]
            texts = [queries[i]["text"] for i, _, _ in rows]
            alone, scores = (np.asarray(a) for a in scorer.scores(vectors, texts))
            placed = scores >= abstentions.threshold  # an abstained question is never re-ranked
            placed_by[name] = placed
            # The expert the earlier questions alone route to (their mean embedding, their words), None where it abstains.
            means = np.stack([earlier_vector(contexts[j].vectors) for _, j, _ in rows])
            turn_probs, turn_scores = (np.asarray(a) for a in scorer.scores(means, [" ".join(contexts[j].turns) for _, j, _ in rows]))
            history_expert[name] = [int(np.argmax(p)) if sc >= abstentions.threshold else None for p, sc in zip(turn_probs, turn_scores, strict=True)]
            gold[name] = np.array([domains.index(domain[i]) for i, _, _ in rows])
            ranked[name] = {None: alone}
            for weight in weights:
                mixed = np.stack([blend(vectors[k], contexts[j].vectors, weight) for k, (_, j, _) in enumerate(rows)])
                with_turns = np.stack([within_question(b, a) for b, a in zip(np.asarray(scorer.scores(mixed, texts)[0]), alone, strict=True)])
                for below in belows:
                    use = np.array([placed[k] and unsure(alone[k], below) for k in range(len(rows))])
                    ranked[name][(weight, below)] = np.where(use[:, None], with_turns, alone)
        for key in [None, *[(w, b) for w in weights for b in belows]]:
            figures = {name: round(float((np.argmax(ranked[name][key], axis=1) == gold[name]).mean()), 4) for name in sets}
            figures["mean"] = round((figures["follow_ups"] + figures["changes_of_subject"]) / 2, 4)
            grid["question_alone" if key is None else f"weight={key[0]:g},below={key[1]:g}"] = figures
        chosen = max(((w, b) for w in weights for b in belows),
                     key=lambda k: (round(grid[f"weight={k[0]:g},below={k[1]:g}"]["mean"], 3), -k[0], -k[1]))
        margin = conversation_rule.STICKY_MARGIN
        configured = (conversation_rule.CONTEXT_WEIGHT, conversation_rule.CONTEXT_BELOW)
        for key, label in ((None, "question_alone"), (chosen, "chosen"), (configured, "configured")):
            if key not in ranked["follow_ups"]:
                continue  # the configured pair is off the grid
            stickiness[label] = {
                name: round(float(np.mean([served_first(ranked[name][key][k], domains[conversation], margin, domains) == domains[gold[name][k]]
                                           for k, (_, _, conversation) in enumerate(rows)])), 4)
                for name, rows in sets.items()
            }
        # Who answers, by policy, at the configured pair: stateless (an abstained question gets no expert), stateless with
        # the earlier questions' expert standing in for a stored conversation's, and a stored conversation (its expert
        # taken as above).
        answering: dict[str, dict[str, float]] = {}
        if configured in ranked["follow_ups"]:
            for policy in ("stateless", "stateless_history_expert", "stored"):
                answering[policy] = {}
                for name, rows in sets.items():
                    right = []
                    for k, (_, _, conversation) in enumerate(rows):
                        keep = {"stateless": None, "stored": conversation, "stateless_history_expert": history_expert[name][k]}[policy]
                        first = served_first(ranked[name][configured][k], domains[keep] if keep is not None else "", margin, domains,
                                             abstained=not placed_by[name][k])
                        right.append(first == domains[gold[name][k]])
                    answering[policy][name] = round(float(np.mean(right)), 4)
    finally:
        abstentions.close()
    for label, figures in grid.items():
        print(f"{label:26s} follow-ups {figures['follow_ups']:.3f}  changes of subject {figures['changes_of_subject']:.3f}  mean {figures['mean']:.3f}")
    print(f"chosen on {args.split}: CONTEXT_WEIGHT={chosen[0]:g} CONTEXT_BELOW={chosen[1]:g}")
    print(f"with a stored conversation's stickiness (margin {margin:g}): {stickiness}")
    print(f"who answers at the configured pair, abstentions included: {answering}")
    if args.json:
        Path(args.json).write_text(json.dumps({"split": args.split, "questions": {k: len(v) for k, v in sets.items()}, "grid": grid,
                                               "chosen": {"weight": chosen[0], "below": chosen[1]}, "with_stickiness": stickiness,
                                               "sticky_margin": margin, "answering": answering}, indent=2))


def served_first(probs: np.ndarray, keep: str, margin: float, domains: list[str], abstained: bool = False) -> str | None:
    """Serving's first expert (``serving.chat``): the conversation's ``keep`` for a question the router abstains on (None
    without one), else the ranking with ``keep`` kept first unless another expert beats it by more than ``margin``."""
    from serving.conversations import sticky_order

    if abstained:
        return keep or None
    order = [{"slug": domains[j], "score": float(probs[j])} for j in np.argsort(-probs)]
    return str(sticky_order(order, keep, margin)[0][0]["slug"])


if __name__ == "__main__":
    main()
