"""Evaluations route as serving does: ``ProductRouter.route`` applies the follow-up rule of ``serving.route``."""

from __future__ import annotations

import numpy as np

from evaluation import abstentions
from knowledge.ml.conversation import SearchContext
from routing.ml import conversation as conversation_rule


class ByAxis(abstentions.ProductRouter):
    """A router over two experts that reads the first two coordinates; a question with "weather" in it scores 0 (abstains)."""

    def __init__(self):
        self.threshold, self.classes, self._documents, self._scorer = 0.5, ["dmv", "ssa"], None, self

    def scores(self, vectors, texts):
        z = 4.0 * np.asarray(vectors)[:, :2]
        p = np.exp(z - z.max(axis=1, keepdims=True))
        return p / p.sum(axis=1, keepdims=True), np.array([0.0 if "weather" in t else 1.0 for t in texts])


def unit(*v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_an_unsure_follow_up_is_ranked_with_its_turns_and_abstentions_read_the_question_alone(monkeypatch):
    monkeypatch.setattr(conversation_rule, "CONTEXT_WEIGHT", 3.0)
    monkeypatch.setattr(conversation_rule, "CONTEXT_BELOW", 0.6)
    monkeypatch.setattr(conversation_rule, "STICKY_MARGIN", 0.15)
    router = ByAxis()
    about_ssa = SearchContext(turns=("my pension",), vectors=unit(0, 1, 0)[None, :], weight=1.0)
    about_weather = SearchContext(turns=("the weather",), vectors=unit(0, 1, 0)[None, :], weight=1.0)
    vectors = np.stack([unit(1, 0.95, 0), unit(1, 0.95, 0), unit(1, 0, 0), unit(1, 0.95, 0), unit(1, 0.95, 0)])
    texts = ["licence and pension", "licence and pension", "renew my licence", "weather and pension", "weather and pension"]
    contexts = [None, about_ssa, about_ssa, about_ssa, about_weather]
    ranking = router.route(vectors, texts, contexts, ["ssa", "dmv", "va"])
    assert ranking.probs.shape == (5, 3)
    assert np.all(ranking.probs[:, 2] == 0)
    assert [int(np.argmax(p)) for p in ranking.probs[:3]] == [1, 0, 1]  # dmv alone; with its ssa conversation the unsure one goes to ssa
    assert ranking.blended.tolist() == [False, True, False, False, False]  # an opener, a sure question, abstained ones keep their ranking
    assert ranking.abstained.tolist() == [False, False, False, True, True]
    # Serving's order: a sure question leaves the conversation's expert; an abstained one stays with it, alone; earlier
    # questions the router places nowhere (the weather) stand in for nothing: no expert answers.
    assert ranking.served == [[1, 0], [0, 1], [1, 0], [0], []]
    monkeypatch.setattr(conversation_rule, "CONTEXT_WEIGHT", 0)
    alone = router.route(vectors, texts, contexts, ["ssa", "dmv"])
    assert not alone.blended.any()
    assert int(np.argmax(alone.probs[1])) == 1
    assert alone.served[1] == [0, 1]
