"""The playground shows a two-expert answer's experts, and a clarifying question's choices as buttons that ask the question again of the chosen expert."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from serving import chat
from tests.factories import make_expert
from tests.support.chat_results import fake_result

pytestmark = pytest.mark.django_db
QUESTION = "I lost my card, how do I get a replacement?"


@pytest.fixture
def experts(db):
    make_expert("dmv", "Motor Vehicles")
    make_expert("ssa", "Social Security")


def asked_back(question: str, model: str = "auto", **_: object) -> chat.ChatResult:
    result = fake_result(question)
    result.answer = "Which do you mean: Social Security (ssa) or Motor Vehicles (dmv)? Reply with one of them and its expert will answer your question."
    result.expert, result.citations, result.passages, result.grounded, result.answer_source = "", [], [], False, "clarify"
    result.clarify = [{"slug": "ssa", "name": "Social Security"}, {"slug": "dmv", "name": "Motor Vehicles"}]
    result.conversation_id = "conv_clarify"
    return result


def test_a_clarifying_question_shows_one_button_per_choice_that_asks_the_question_of_that_expert(console, experts, monkeypatch):
    monkeypatch.setattr(chat, "answer", asked_back)
    html = console.post(reverse("console-playground-answer"), {"question": QUESTION, "mode": "auto"}).content.decode()
    start = html.index('id="clarify-choices"')
    choices = html[start : html.index("</div>", start)]
    forms = re.findall(r"<form .*?</form>", choices, flags=re.S)
    assert len(forms) == 2
    for form, (slug, name) in zip(forms, [("ssa", "Social Security"), ("dmv", "Motor Vehicles")], strict=True):
        assert f'name="mode" value="{slug}"' in form
        assert f'name="question" value="{QUESTION}"' in form
        assert 'name="conversation_id" value="conv_clarify"' in form
        assert f'data-choice="{slug}">{name}</button>' in form
        assert 'name="csrfmiddlewaretoken"' in form
        assert f'data-stream-url="{reverse("console-playground-stream")}"' in form
    assert "asks which expert you mean" in html
    assert "not grounded" not in html


def test_a_choice_button_posts_a_question_the_chosen_expert_answers(console, experts, monkeypatch):
    asked = []
    monkeypatch.setattr(chat, "answer", lambda question, model="auto", **kw: asked.append((question, model, kw["conversation_id"])) or fake_result(question))
    response = console.post(reverse("console-playground-answer"), {"question": QUESTION, "mode": "dmv", "conversation_id": "conv_clarify"})
    assert response.status_code == 200
    assert asked == [(QUESTION, "dmv", "conv_clarify")]


def test_a_two_expert_answer_names_both_experts(console, experts, monkeypatch):
    def both(question: str, model: str = "auto", **_: object) -> chat.ChatResult:
        result = fake_result(question)
        result.experts_answering = ["dmv", "ssa"]
        return result

    monkeypatch.setattr(chat, "answer", both)
    html = console.post(reverse("console-playground-answer"), {"question": QUESTION, "mode": "auto"}).content.decode()
    assert re.search(r'id="answered-by">Motor Vehicles and Social Security</strong>', html)
    assert 'id="answer-experts"' in html
    assert 'id="clarify-choices"' not in html


def test_a_question_that_asks_two_names_the_part_each_expert_answered(console, experts, monkeypatch):
    def split(question: str, model: str = "auto", **_: object) -> chat.ChatResult:
        result = fake_result(question)
        result.experts_answering = ["dmv", "ssa"]
        result.asked = {"dmv": "How do I renew my licence", "ssa": "when is my pension paid?"}
        return result

    monkeypatch.setattr(chat, "answer", split)
    html = console.post(reverse("console-playground-answer"), {"question": "How do I renew my licence, and when is my pension paid?",
                                                                "mode": "auto"}).content.decode()
    assert ("Your question asks two things: Motor Vehicles answered “How do I renew my licence”; "
            "Social Security answered “when is my pension paid?”.") in html
    assert "Both experts' documents hold this question" not in html
