"""An evaluation's routed arms reach only the dataset's own experts, never the flat arm's copy of every document."""

from __future__ import annotations

import pytest

from evaluation.workspace import FLAT, Dataset, ask, load
from knowledge import search
from knowledge.ml import routed
from tests.support.eval_datasets import write_answer_dataset


@pytest.mark.django_db(transaction=True)
def test_a_widened_routed_search_never_reads_the_flat_arms_collection(tmp_path, settings, monkeypatch):
    settings.EXTRACTIVE_MIN_SCORE = 0.1
    write_answer_dataset(tmp_path)
    dataset = Dataset.read(tmp_path)
    loaded = load(dataset, flat=True, say=lambda line: None)
    # A router unsure of every question: the routed search widens to every other expert it may reach, at the same weight.
    monkeypatch.setattr(routed, "WIDEN_BELOW", 2.0)
    monkeypatch.setattr(search, "routing_weights", lambda chosen, weights, others, threshold, power=None: dict.fromkeys([*chosen, *others], 1.0))
    questions = dataset.questions("test")

    def experts_read(allowed):
        return {p["expert"] for q in questions for p in ask(q, "auto", allowed).passages}

    assert FLAT in experts_read(None)  # unscoped, the widening reaches the flat arm's copy, which no team has
    assert experts_read(loaded.scope("auto")) == set(loaded.experts.values())
    assert loaded.scope(FLAT) == {FLAT}


@pytest.mark.django_db(transaction=True)
def test_answers_and_retrieval_ask_each_arm_within_its_scope(tmp_path, settings, monkeypatch):
    from evaluation import answers, retrieval

    settings.EXTRACTIVE_MIN_SCORE = 0.1
    write_answer_dataset(tmp_path)
    asked: set[tuple[str, frozenset[str] | None]] = set()

    def spy(question, model, allowed=None):
        asked.add((model, None if allowed is None else frozenset(allowed)))
        return ask(question, model, allowed)

    team = frozenset({"cars", "money"})
    monkeypatch.setattr(answers, "ask", spy)
    answers.evaluate_answers(tmp_path, answers.AnswerConfig(limit=2, generators=("extractive",), modes=("flat", "auto", "oracle")), say=lambda line: None)
    assert {scope for model, scope in asked if model != FLAT} == {team}
    assert {scope for model, scope in asked if model == FLAT} == {frozenset({FLAT})}

    asked.clear()
    monkeypatch.setattr(retrieval, "ask", spy)
    retrieval.evaluate_retrieval(tmp_path, say=lambda line: None, limit=2)
    assert {scope for model, scope in asked if model != FLAT} == {team}
    assert {model for model, _ in asked} >= {"auto", "auto:fast", FLAT}
