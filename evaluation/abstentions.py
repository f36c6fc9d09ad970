"""The product router's decisions on a dataset's questions, for evaluations that follow serving's rules.

``serving.chat`` searches a follow-up the router abstains on without the conversation's earlier turns
(a change of subject; the in-scope score reads the question alone), and ``serving.route`` ranks a
follow-up the router is unsure of alone with those turns (``routing.ml.conversation``). ``evaluate
answers``, ``evaluate retrieval`` and the tools need the same decisions: ``ProductRouter`` trains
the router as ``evaluate router`` does and answers "would it abstain?" for any questions, ``route``
ranks them as served, and ``product_routes`` does both for a dataset's rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.datasets import search_contexts, typo_copy_encoder
from evaluation.knowledge_routing import KnowledgeRouting
from evaluation.router import DEFAULT_VARIANT, TARGET_RECALL, VARIANTS, RouterMethod, Split
from routing.ml.training import TrainConfig


@dataclass
class ProductRanking:
    """``ProductRouter.route``'s answer for n questions."""

    probs: np.ndarray  # (n, domains): the router's probabilities as ranked (blended for the unsure follow-ups)
    abstained: np.ndarray  # (n,) the in-scope score under the threshold (read on the question alone)
    blended: np.ndarray  # (n,) ranked with the conversation's earlier turns
    served: list[list[int]]  # each question's candidate domains in serving's order (stickiness applied); [] = no expert answers


class ProductRouter:
    """The product's router on a dataset: ``router(vectors, texts) -> bool array`` (would it abstain?), ``route`` (as served).

    The router is trained as ``evaluate router`` trains it (``RouterMethod``: ``train_text_router``,
    the default variant, the dataset's train split, calibrated on its validation split), with the
    dataset's documents as evidence when ``ROUTER_KNOWLEDGE`` is on and validation keeps the combiner
    for the ranking or for abstention (as training does). Its in-scope score reads the question alone, as served. ``close()`` drops the
    documents' temporary index.
    """

    def __init__(self, dataset: Path, queries: list[dict[str, Any]], qx: np.ndarray, model: str, say: Any, seed: int = 0):
        from django.conf import settings

        split = Split(queries, qx, "domain", seed)
        (x_train, y_train), (x_val, y_val) = split.xy("train"), split.xy("val")
        say(f"  training the product's router on {len(y_train)} questions, for its decisions")
        method = RouterMethod(VARIANTS[DEFAULT_VARIANT], TrainConfig(seed=seed)).fit(
            x_train, y_train, x_val, y_val, len(split.classes), split.texts("train"), split.texts("val"), typo_copy_encoder(Path(dataset).name, model, say))
        self.threshold, self._scorer = float(method.result_.metrics["abstain_threshold"]), method.router_
        self.classes = list(split.classes)
        self._documents: KnowledgeRouting | None = None
        if settings.ROUTER_KNOWLEDGE:
            self._documents = KnowledgeRouting(split, method.router_, Path(dataset), say, TARGET_RECALL, seed, router_threshold=self.threshold)
            if self._documents.combiner.serves:  # kept for the ranking or for abstention, as training does
                self.threshold, self._scorer = float(self._documents.threshold), self._documents


    def __call__(self, vectors: np.ndarray, texts: list[str]) -> np.ndarray:
        if not len(vectors):
            return np.zeros(0, dtype=bool)
        return np.asarray(self._scorer.scores(np.asarray(vectors), list(texts))[1]) < self.threshold

    def route(self, vectors: np.ndarray, texts: list[str], contexts: list[Any], domains: list[str]) -> ProductRanking:
        """The product's routing as served, for questions sent with their conversation's messages (``serving.chat``).

        ``contexts[k]``: the earlier user turns of question ``k`` (a ``SearchContext``: its ``turns``
        and ``vectors``; None for an opener). A question the router places but is unsure of alone is
        ranked again blended with them, as ``serving.route`` does (``routing.ml.conversation``, at
        ``CONTEXT_WEIGHT`` and ``CONTEXT_BELOW``); abstention reads the question alone.
        The expert the earlier turns route to stands in for a stored conversation's
        (``serving.route.earlier_expert``): it keeps the question unless another expert beats it by
        ``STICKY_MARGIN``, and it answers a question the router abstains on. Columns
        follow ``domains`` (0 for a domain the router was not trained on).
        """
        from routing.ml import conversation as conversation_rule
        from routing.ml.conversation import blend, earlier_vector, unsure, within_question
        from serving.conversations import sticky_order

        n = len(vectors)
        vectors, texts = np.asarray(vectors), list(texts)
        probs, scores = (np.asarray(a, dtype=np.float64) for a in self._scorer.scores(vectors, texts)) if n else (np.zeros((0, len(self.classes))), np.zeros(0))
        abstained = scores < self.threshold
        weight, below = conversation_rule.CONTEXT_WEIGHT, conversation_rule.CONTEXT_BELOW
        with_turns = [k for k in range(n) if contexts[k] is not None and contexts[k].vectors is not None and len(contexts[k].vectors)]
        rows = [k for k in with_turns if weight > 0 and not abstained[k] and unsure(probs[k], below)]
        if rows:
            mixed = np.stack([blend(vectors[k], contexts[k].vectors, weight) for k in rows])
            blended = np.asarray(self._scorer.scores(mixed, [texts[k] for k in rows])[0], dtype=np.float64)
            probs[rows] = np.stack([within_question(b, probs[k]) for b, k in zip(blended, rows, strict=True)])
        earlier: dict[int, int] = {}
        if with_turns:
            means = np.stack([earlier_vector(contexts[k].vectors) for k in with_turns])
            turn_probs, turn_scores = self._scorer.scores(means, [" ".join(contexts[k].turns) for k in with_turns])
            earlier = {k: int(np.argmax(p)) for k, p, sc in zip(with_turns, np.asarray(turn_probs), np.asarray(turn_scores), strict=True)
                       if sc >= self.threshold}
        margin = conversation_rule.STICKY_MARGIN
        served: list[list[str]] = []
        for k in range(n):
            keep = self.classes[earlier[k]] if k in earlier else ""
            if abstained[k]:
                served.append([keep] if keep else [])
                continue
            ranked = [{"slug": self.classes[j], "score": float(probs[k, j])} for j in np.argsort(-probs[k], kind="stable")]
            served.append([str(e["slug"]) for e in sticky_order(ranked, keep, margin)[0]])
        out = np.zeros((n, len(domains)))
        for j, name in enumerate(self.classes):
            if name in domains:
                out[:, domains.index(name)] = probs[:, j]
        blended = np.zeros(n, dtype=bool)
        blended[rows] = True
        order = [[domains.index(name) for name in names if name in domains] for names in served]
        return ProductRanking(out, abstained, blended, order)

    def close(self) -> None:
        if self._documents is not None:
            self._documents.close()


@dataclass
class ProductRoutes:
    """The product's routing of a dataset's questions, as served (``product_routes``)."""

    probs: np.ndarray  # (questions, domains): the ranking's probabilities; zeros for rows not routed
    abstained: set[int]  # rows the router abstains on (a follow-up among them is searched alone)
    with_conversation: set[int]  # follow-ups ranked with their earlier turns (``routing.ml.conversation``)
    report: dict[str, Any]
    served: dict[int, list[int]] = field(default_factory=dict)  # row -> candidate domains in serving's order ([]: no expert)


def product_routes(dataset: Path, queries: list[dict[str, Any]], qx: np.ndarray, rows: list[int], domains: list[str], model: str, say: Any,
                   seed: int = 0, encoding: dict[str, int] | None = None) -> ProductRoutes:
    """Route ``rows`` as serving does: the product's router (``ProductRouter``), each follow-up with the user's earlier turns."""
    contexts = search_contexts(dataset, queries, model, 1.0, say, **(encoding or {}))  # what the rule reads, whatever the search's weight
    router = ProductRouter(dataset, queries, qx, model, say, seed)
    try:
        ranking = router.route(qx[rows], [queries[i].get("text") or "" for i in rows], [contexts[i] for i in rows], domains)
    finally:
        router.close()
    probs, abstained, blended = ranking.probs, ranking.abstained, ranking.blended
    out = np.zeros((len(queries), len(domains)))
    if rows:
        out[rows] = probs
    follow_ups = sum(contexts[i] is not None for i in rows)
    report = {
        "kind": "the product's router (train_text_router, the default variant, as evaluate router trains it; the documents as evidence when "
                "ROUTER_KNOWLEDGE is on), unsure follow-ups ranked with the user's earlier turns (routing.ml.conversation's CONTEXT_WEIGHT, CONTEXT_BELOW)",
        "routed": len(rows), "follow_ups": int(follow_ups), "ranked_with_conversation": int(blended.sum()), "abstained": int(abstained.sum()),
        # Served "No expert covers this question" (abstained, no conversation expert to stay with, no fallback expert):
        # the routed modes search nothing for them.
        "no_expert": sum(not order for order in ranking.served),
    }
    say(f"  the product's router: {report['ranked_with_conversation']} of {follow_ups} follow-ups ranked with their conversation, "
        f"{report['abstained']} of {len(rows)} questions abstained on")
    return ProductRoutes(out, {i for i, a in zip(rows, abstained.tolist(), strict=True) if a},
                         {i for i, b in zip(rows, blended.tolist(), strict=True) if b}, report, dict(zip(rows, ranking.served, strict=True)))
