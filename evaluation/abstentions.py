"""The product router's abstentions on a dataset's questions, for evaluations that follow serving's rules.

``serving.chat`` searches a follow-up the router abstains on without the conversation's earlier turns
(a change of subject; the in-scope score reads the question alone). ``evaluate answers`` and
``tools/measure_offtopic_followups.py`` need the same decisions: ``ProductAbstentions`` trains the
router as ``evaluate router`` does and answers "would it abstain?" for any questions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evaluation.datasets import typo_copy_encoder
from evaluation.knowledge_routing import KnowledgeRouting
from evaluation.router import DEFAULT_VARIANT, TARGET_RECALL, VARIANTS, RouterMethod, Split
from routing.ml.training import TrainConfig


class ProductAbstentions:
    """Whether the product's router abstains on questions: ``abstentions(vectors, texts) -> bool array``.

    The router is trained as ``evaluate router`` trains it (``RouterMethod``: ``train_text_router``,
    the default variant, the dataset's train split, calibrated on its validation split), with the
    dataset's documents as evidence when ``ROUTER_KNOWLEDGE`` is on and validation keeps the combiner
    (as training does). Its in-scope score reads the question alone, as served. ``close()`` drops the
    documents' temporary index.
    """

    def __init__(self, dataset: Path, queries: list[dict[str, Any]], qx: np.ndarray, model: str, say: Any, seed: int = 0):
        from django.conf import settings

        split = Split(queries, qx, "domain", seed)
        (x_train, y_train), (x_val, y_val) = split.xy("train"), split.xy("val")
        say(f"  training the product's router on {len(y_train)} questions, for its abstentions")
        method = RouterMethod(VARIANTS[DEFAULT_VARIANT], TrainConfig(seed=seed)).fit(
            x_train, y_train, x_val, y_val, len(split.classes), split.texts("train"), split.texts("val"), typo_copy_encoder(Path(dataset).name, model, say))
        self.threshold, self._scorer = float(method.result_.metrics["abstain_threshold"]), method.router_
        self._documents: KnowledgeRouting | None = None
        if settings.ROUTER_KNOWLEDGE:
            self._documents = KnowledgeRouting(split, method.router_, Path(dataset), say, TARGET_RECALL, seed, router_threshold=self.threshold)
            if self._documents.combiner.active:
                self.threshold, self._scorer = float(self._documents.threshold), self._documents

    def __call__(self, vectors: np.ndarray, texts: list[str]) -> np.ndarray:
        if not len(vectors):
            return np.zeros(0, dtype=bool)
        return np.asarray(self._scorer.scores(np.asarray(vectors), list(texts))[1]) < self.threshold

    def close(self) -> None:
        if self._documents is not None:
            self._documents.close()


def abstained_follow_ups(dataset: Path, queries: list[dict[str, Any]], qx: np.ndarray, rows: list[int], contexts: list[Any], model: str,
                         say: Any, seed: int = 0) -> set[int]:
    """The follow-ups among ``rows`` (those with a search context) that the product's router abstains on: served, they are searched alone."""
    follow_ups = [i for i in rows if contexts[i] is not None]
    if not follow_ups:
        return set()
    abstentions = ProductAbstentions(dataset, queries, qx, model, say, seed)
    try:
        flags = abstentions(qx[follow_ups], [queries[i]["text"] for i in follow_ups])
    finally:
        abstentions.close()
    say(f"  the product's router abstains on {int(flags.sum())} of {len(follow_ups)} follow-ups: searched as asked")
    return {i for i, flag in zip(follow_ups, flags.tolist(), strict=True) if flag}
