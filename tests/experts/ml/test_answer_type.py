"""The kind of fact a question asks for, and the answer that states it (``experts.ml.answer_type``)."""

from __future__ import annotations

import pytest

from experts.ml import extractive
from experts.ml.answer_type import expected, states
from experts.ml.extractive import Passage, extractive_answer


@pytest.mark.parametrize(("question", "kind"), [
    ("How long is the security code they text me good for?", "duration"),
    ("How far ahead of time should I file for retirement?", "duration"),
    ("How many days of missed payments before my loan defaults?", "duration"),
    ("What does DMV charge per record lookup?", "money"),
    ("How much life insurance can I get as a military spouse?", "money"),
    ("What's the minimum age to drive a taxi?", "age"),
    ("Is there an age cutoff for my kids to use the benefit?", "age"),
    ("If my appeal goes to a hearing, how far will I have to travel?", "distance"),
    ("How much of my check can my spouse get?", "percent"),
    ("What number do I call with questions about my insurance?", "phone"),
    ("How many credits do I need?", "count"),
    ("How do I renew my licence online?", None),
    ("Can my grandmother take out the loan?", None),
])
def test_the_kind_of_fact_is_read_off_the_questions_wording(question, kind):
    assert expected(question) == kind


@pytest.mark.parametrize(("kind", "sentence", "held"), [
    ("duration", "Enter the code within 10 minutes of receiving it.", True),
    ("duration", "We may continue this program until December 31, 2021.", True),
    ("duration", "The code is sent by text message.", False),
    ("money", "There is a fee of $7.00 for each search.", True),
    ("money", "There is no additional fee for the restriction.", True),
    ("money", "Searches are made by phone.", False),
    ("age", "You must be 18 years of age or older.", True),
    ("age", "Benefits stop at age 18.", True),
    ("age", "You must hold a licence.", False),
    ("distance", "The hearing is usually held within 75 miles of your home.", True),
    ("percent", "Each may get up to 50 percent of the benefit.", True),
    ("percent", "A rating of at least 30% is needed.", True),
    ("phone", "Call the Insurance Center at 800-669-8477.", True),
    ("phone", "Call the Insurance Center at 800 - 669 - 8477.", True),
    ("phone", "Call the Insurance Center.", False),
    ("count", "You need 40 credits.", True),
])
def test_a_sentence_states_a_fact_of_a_kind(kind, sentence, held):
    assert states(kind, sentence) is held


def test_the_answer_adds_the_best_sentence_that_states_what_the_question_asks_for(encoder, monkeypatch):
    page = Passage(text="A security code protects your online account. We send the security code to your phone by text message. "
                        "You can also get the security code by email. Enter the code within 10 minutes or ask for a new one.",
                   title="Signing in", score=0.8, chunk_id="ssa-1")
    question = "How long is the security code they text me good for?"

    answer = extractive_answer(question, [page], encoder.encode, max_sentences=1, max_words=30)
    alone = extractive_answer(question, [page], encoder.encode, max_sentences=1)

    monkeypatch.setattr(extractive, "stating_first", lambda question, ranked: ranked)
    unaware = extractive_answer(question, [page], encoder.encode, max_sentences=1, max_words=30)

    assert "within 10 minutes" not in alone.text  # the scorer's best sentence states no time
    assert "within 10 minutes" not in unaware.text  # nor do the next best that fit
    assert "within 10 minutes" in answer.text
    assert alone.text.removesuffix(" [1]") in answer.text  # the best sentence is still quoted
    assert len(answer.text.replace("[1]", "").split()) <= 30
