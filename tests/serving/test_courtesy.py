"""A turn that only thanks or says goodbye gets a polite reply, not a sentence searched for it (``conversation.courtesy``)."""

from __future__ import annotations

import json

import pytest

from routing.ml.conversation import GOODBYE_REPLY, THANKS_REPLY, courtesy
from tests.support.serving import chat, event_for, meta_of


@pytest.mark.parametrize(("turn", "reply"), [
    ("thank you", THANKS_REPLY), ("Thanks!", THANKS_REPLY), ("ok, thank you so much for the help.", THANKS_REPLY),
    ("great thanks", THANKS_REPLY), ("bye", GOODBYE_REPLY), ("Thanks, goodbye!", GOODBYE_REPLY),
    # Anything that still asks something is a question.
    ("thanks, and how do I renew my licence?", ""), ("Thank you. What is the fee?", ""), ("thanks to the new law, do I qualify?", ""),
    ("ok", ""), ("yes", ""),
])
def test_only_a_turn_that_thanks_or_says_goodbye_is_answered_politely(turn, reply):
    assert courtesy(turn) == reply


def test_thanks_gets_a_polite_reply_with_nothing_routed_or_retrieved(serving, client):
    response = chat(client, "Thank you so much!")
    meta = meta_of(response)
    assert response.json()["choices"][0]["message"]["content"] == THANKS_REPLY
    assert meta["citations"] == []
    assert serving["generator"].requests == []  # no expert was asked
    event = event_for(response.json()["id"])
    assert event.answer_source == "courtesy"
    assert event.expert == ""


def test_a_question_after_thanks_is_still_answered(serving, client):
    meta = meta_of(chat(client, "thanks, and how do I renew my licence?"))
    assert meta["experts_answering"] == ["dmv"]


def test_a_streamed_thanks_gets_the_same_reply(serving, client):
    body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "thanks!"}]}
    response = client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200
    blocks = [b[len("data: "):] for b in b"".join(response.streaming_content).decode().split("\n\n") if b.strip()]
    assert blocks[-1] == "[DONE]"
    assert "".join(json.loads(b)["choices"][0]["delta"].get("content") or "" for b in blocks[:-1]) == THANKS_REPLY
