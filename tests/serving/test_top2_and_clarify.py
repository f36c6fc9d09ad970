"""``auto`` answers from both top experts where both experts' documents hold the question, asks back where they do not
settle it, and routes the reply to the clarifying question to the expert it names (``serving.breadth``)."""

from __future__ import annotations

import json

import pytest

from serving import breadth
from tests.support.serving import chat, event_for, meta_of

# "licence pension" points equally at dmv and ssa (the fake encoder): the router cannot tell them apart.
BOTH_WAYS = "licence pension question"
STRONG, WEAK = 0.9, 0.1


@pytest.fixture
def evidence(monkeypatch):
    """Each expert's best match in its documents (the store's evidence lookup), set per test."""
    matches: dict[str, float] = {}

    def lookup(slugs):
        return lambda positions, vector, question: [(matches[slugs[j]], 1.0) if slugs[j] in matches else None for j in positions]

    monkeypatch.setattr("knowledge.evidence.evidence_lookup", lookup)
    return matches


def ask_back(client, evidence):
    evidence.update(dmv=WEAK, ssa=WEAK)
    return chat(client, BOTH_WAYS)


def test_a_question_both_experts_documents_hold_gets_a_part_from_each_named_and_cited(serving, client, evidence):
    evidence.update(dmv=STRONG, ssa=STRONG)
    response = chat(client, BOTH_WAYS)
    meta = meta_of(response)
    assert meta["experts_answering"] == ["dmv", "ssa"]
    assert meta["clarify"] is None
    text = response.json()["choices"][0]["message"]["content"]
    assert text == "DMV (dmv): dmv says: The dmv office handles this. [1]\n\nSSA (ssa): ssa says: The ssa office handles this. [2]"
    assert [c["expert"] for c in meta["citations"]] == ["dmv", "ssa"]
    # Each part is shorter than a whole answer: the generator was asked for PART_WORDS.
    assert [r.max_tokens for r in serving["generator"].requests] == [breadth.PART_WORDS, breadth.PART_WORDS]
    assert event_for(response.json()["id"]).trace["experts_answering"] == ["dmv", "ssa"]


def test_a_question_for_one_expert_keeps_one_answer(serving, client, evidence):
    evidence.update(dmv=STRONG, ssa=STRONG)
    meta = meta_of(chat(client, "how do I renew my licence"))
    assert meta["experts_answering"] == ["dmv"]
    assert meta["clarify"] is None
    assert serving["generator"].requests[0].max_tokens is None


def test_a_question_the_documents_do_not_settle_is_asked_back_with_its_choices(serving, client, evidence):
    response = ask_back(client, evidence)
    body = response.json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Which do you mean: DMV (dmv) or SSA (ssa)? "
                                             "Reply with one of them and its expert will answer your question."}
    meta = body["switchboard"]
    assert meta["clarify"] == [{"slug": "dmv", "name": "DMV"}, {"slug": "ssa", "name": "SSA"}]
    assert meta["experts_answering"] == []
    assert meta["answer_source"] == "clarify"
    assert serving["store"].calls == []  # nothing searched or generated for the question back
    trace = event_for(body["id"]).trace
    assert trace["clarify"] == meta["clarify"]


def test_an_earlier_turn_of_the_conversation_decides_instead_of_asking_back(serving, client, evidence):
    evidence.update(dmv=WEAK, ssa=WEAK)
    body = {"model": "auto", "messages": [{"role": "user", "content": "my licence expired"}, {"role": "assistant", "content": "Renew it."},
                                          {"role": "user", "content": BOTH_WAYS}]}
    response = client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")
    meta = meta_of(response)
    assert meta["clarify"] is None
    assert meta["experts_answering"] == ["dmv"]


def follow_up(client, reply: str, model: str = "auto", asked: str = BOTH_WAYS, stream: bool = False):
    question_back = breadth.clarify_text([{"slug": "dmv", "name": "DMV"}, {"slug": "ssa", "name": "SSA"}])
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": asked}, {"role": "assistant", "content": question_back},
                                                           {"role": "user", "content": reply}]}
    return client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")


@pytest.mark.parametrize(("reply", "model"), [("The SSA one please", "auto"), ("ssa", "auto"), ("that one", "ssa")])
def test_the_reply_naming_a_choice_or_its_slug_as_model_gets_that_experts_answer_to_the_question_asked(serving, client, evidence, reply, model):
    evidence.update(dmv=WEAK, ssa=WEAK)
    response = follow_up(client, reply, model)
    meta = meta_of(response)
    assert meta["expert"] == "ssa"
    assert meta["chosen_after_clarify"] == "ssa"
    assert meta["clarify"] is None
    assert serving["generator"].requests[-1].question == BOTH_WAYS  # the question asked before, not the reply
    assert event_for(response.json()["id"]).trace["chosen_after_clarify"] == "ssa"


def test_a_reply_naming_no_choice_is_routed_as_a_follow_up(serving, client, evidence):
    evidence.update(dmv=WEAK, ssa=WEAK)
    meta = meta_of(follow_up(client, "actually, about my veteran benefits"))
    assert "chosen_after_clarify" not in meta
    assert meta["expert"] == "va"
    assert meta["clarify"] is None  # the conversation has an earlier turn: never asked back twice


def test_a_reply_choosing_an_expert_the_key_may_not_ask_is_refused(serving, client, evidence, settings):
    from experts.models import Expert

    Expert.objects.filter(slug="ssa").update(public=False)
    response = follow_up(client, "ssa")
    assert response.status_code == 403


def streamed(response) -> list:
    blocks = [b for b in b"".join(response.streaming_content).decode().split("\n\n") if b.strip()]
    return [json.loads(b.removeprefix("data: ")) for b in blocks if b != "data: [DONE]"]


def test_the_streamed_final_chunk_carries_the_experts_answering_and_the_choices(serving, client, evidence):
    evidence.update(dmv=STRONG, ssa=STRONG)
    body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": BOTH_WAYS}]}
    last = streamed(client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json"))[-1]
    assert last["switchboard"]["experts_answering"] == ["dmv", "ssa"]
    evidence.update(dmv=WEAK, ssa=WEAK)
    chunks = streamed(client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json"))
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks).startswith(breadth.CLARIFY_LEAD)
    assert chunks[-1]["switchboard"]["clarify"] == [{"slug": "dmv", "name": "DMV"}, {"slug": "ssa", "name": "SSA"}]
    chosen = streamed(follow_up(client, "DMV", stream=True))[-1]["switchboard"]
    assert (chosen["expert"], chosen["chosen_after_clarify"], chosen["experts_answering"]) == ("dmv", "dmv", ["dmv"])


def test_a_question_that_asks_two_of_two_experts_gets_each_part_answered_by_its_own(serving, client, evidence):
    evidence.update(dmv=WEAK, ssa=WEAK)  # neither the router's top two nor the documents would have asked both
    response = chat(client, "I am moving house. How do I renew my licence, and when is my pension paid?")
    meta = meta_of(response)
    assert meta["experts_answering"] == ["dmv", "ssa"]
    assert meta["clarify"] is None
    # Each expert was asked its own part, with what the user said before asking.
    assert [r.question for r in serving["generator"].requests] == ["I am moving house. How do I renew my licence",
                                                                   "I am moving house. When is my pension paid?"]
    assert [r.max_tokens for r in serving["generator"].requests] == [breadth.PART_WORDS, breadth.PART_WORDS]
    assert [p["asked"] for p in meta["parts"]] == ["I am moving house. How do I renew my licence", "I am moving house. When is my pension paid?"]
    # The trace keeps the part each answered, and the trace page says so.
    event = event_for(response.json()["id"])
    assert event.trace["asked"] == {"dmv": "I am moving house. How do I renew my licence", "ssa": "I am moving house. When is my pension paid?"}


def test_a_question_that_asks_two_of_one_expert_keeps_one_answer(serving, client, evidence):
    meta = meta_of(chat(client, "How do I renew my licence, and what does the licence cost?"))
    assert meta["experts_answering"] == ["dmv"]
    assert [r.question for r in serving["generator"].requests] == ["How do I renew my licence, and what does the licence cost?"]


@pytest.mark.parametrize(("question", "asked"), [
    ("Can I get VA disability, and how soon can I start Social Security retirement?",
     ["Can I get VA disability", "how soon can I start Social Security retirement?"]),
    ("How does work-study pay me? Can I get some of it up front?", ["How does work-study pay me?", "Can I get some of it up front?"]),
    ("What are the fees and deadlines for renewal?", ["What are the fees and deadlines for renewal?"]),
])
def test_the_questions_a_question_asks(question, asked):
    from experts.ml.answer_type import parts

    assert parts(question) == asked
