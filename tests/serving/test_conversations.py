"""Conversations: an id returned on the first turn, earlier turns as the router's context, a sticky expert, expiry."""

from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from knowledge.ml import conversation as search_conversation
from routing.ml import conversation as conversation_rule
from routing.models import Conversation, RoutingEvent
from serving import chat as serving_chat
from serving import conversations, route
from tests.support.serving import DIM, FakeEncoder


def chat(client, content, conversation_id=None, model="auto:fast", history=(), **extra):
    messages = [*history, {"role": "user", "content": content}]
    body = {"model": model, "messages": messages, **extra}
    if conversation_id:
        body["conversation_id"] = conversation_id
    response = client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response


@pytest.fixture
def routes(monkeypatch):
    """Every call to ``route.route``, with its keyword arguments."""
    calls = []
    real = route.route

    def spy(question, *args, **kwargs):
        calls.append({"question": question, **kwargs})
        return real(question, *args, **kwargs)

    monkeypatch.setattr(serving_chat, "route", spy)
    return calls


def test_the_first_turn_returns_a_new_conversation_id_in_the_body_and_a_header(serving, client):
    response = chat(client, "how do I renew my licence")
    conversation_id = response.json()["switchboard"]["conversation_id"]
    assert conversation_id.startswith("conv_")
    assert response["x-switchboard-conversation"] == conversation_id
    row = Conversation.objects.get(conversation_id=conversation_id)
    assert (row.expert, row.n_turns, len(row.turns)) == ("dmv", 1, 1)
    assert row.expires_at > timezone.now() + timedelta(hours=23)


def test_a_client_chosen_id_is_kept_and_also_read_from_metadata(serving, client):
    assert chat(client, "my pension", conversation_id="ticket-42").json()["switchboard"]["conversation_id"] == "ticket-42"
    response = chat(client, "my pension", metadata={"conversation_id": "ticket-42"})
    assert response.json()["switchboard"]["conversation_id"] == "ticket-42"
    assert Conversation.objects.get(conversation_id="ticket-42").n_turns == 2


def test_the_stored_turns_are_the_routers_context_on_the_next_turn(serving, client, routes):
    first = chat(client, "how do I renew my licence").json()["switchboard"]["conversation_id"]
    chat(client, "and the fee?", conversation_id=first)
    assert routes[0]["context_vectors"] is None
    context = routes[1]["context_vectors"]
    assert context.shape == (1, DIM)
    expected = FakeEncoder().encode(["how do I renew my licence"])[0]
    assert np.allclose(context[0], expected, atol=1e-3)  # stored as float16


def test_the_requests_own_earlier_user_messages_are_the_context_when_sent(serving, client, routes):
    history = [{"role": "user", "content": "my veteran benefits"}, {"role": "assistant", "content": "Sure."}]
    chat(client, "how do I renew my licence", history=history)
    assert routes[0]["context"] == ["my veteran benefits"]


@pytest.fixture
def searches(monkeypatch):
    """The ``context`` of every search the chat path runs."""
    calls = []
    real = serving_chat.knowledge.search_experts

    def spy(*args, **kwargs):
        calls.append(kwargs.get("context"))
        return real(*args, **kwargs)

    monkeypatch.setattr(serving_chat.knowledge, "search_experts", spy)
    return calls


def test_a_follow_up_is_searched_with_the_users_earlier_messages_never_the_assistants(serving, client, searches):
    first = chat(client, "how do I renew my licence", model="auto")
    assert searches[-1] is None
    assert "conversation_search" not in first.json()["switchboard"]
    history = [{"role": "user", "content": "how do I renew my licence"}, {"role": "assistant", "content": "Online [1]."}]
    follow_up = chat(client, "what does renewing my licence cost", model="auto", history=history).json()["switchboard"]
    context = searches[-1]
    assert context.turns == ("how do I renew my licence",)
    assert context.weight == pytest.approx(0.5)
    assert np.allclose(context.vectors[0], FakeEncoder().encode(["how do I renew my licence"])[0], atol=1e-6)
    assert follow_up["conversation_search"] == {"earlier_turns": 1}


def test_a_stored_conversation_is_searched_with_its_earlier_questions_embeddings(serving, client, searches):
    first = chat(client, "how do I renew my licence", model="auto").json()["switchboard"]["conversation_id"]
    chat(client, "what does renewing my licence cost", conversation_id=first, model="auto")
    context = searches[-1]
    assert context.turns == ()
    assert context.vectors.shape == (1, DIM)
    assert np.allclose(context.vectors[0], FakeEncoder().encode(["how do I renew my licence"])[0], atol=1e-3)


def test_a_follow_up_the_router_places_nowhere_is_searched_alone_with_its_conversations_expert(serving, client, searches):
    conversation_id = chat(client, "my pension", model="auto").json()["switchboard"]["conversation_id"]
    meta = chat(client, "what about next year?", conversation_id=conversation_id, model="auto").json()["switchboard"]
    assert meta["abstained"] is True
    assert (meta["expert"], meta["sticky"]) == ("ssa", True)
    assert searches[-1] is None  # "my pension" would find it pension passages it did not ask about
    assert meta["conversation_search"] == {"earlier_turns": 0, "left_out": 1, "reason": "question_out_of_scope"}


@pytest.mark.parametrize("follow_up", ["Yes, what about next year?", "what about it next year?"])
def test_a_reply_or_a_turn_pointing_back_is_still_searched_with_its_conversation(serving, client, searches, follow_up):
    conversation_id = chat(client, "my pension", model="auto").json()["switchboard"]["conversation_id"]
    meta = chat(client, follow_up, conversation_id=conversation_id, model="auto").json()["switchboard"]
    assert meta["abstained"] is True
    assert searches[-1] is not None  # a reply cannot change the subject: the conversation is searched
    assert searches[-1].vectors.shape == (1, DIM)
    assert meta["conversation_search"] == {"earlier_turns": 1}


@pytest.mark.parametrize(("question", "continues"), [
    ("Yes, it was cancelled.", True), ("no, I guess not", True), ("thank you", True), ("OK", True),
    ("and could you help me understand the default?", True), ("so how much do I lose if I start early?", True),
    ("Who should complete this?", True), ("It was not quite 30 days.", True), ("can those not in high school use the forecaster?", True),
    ("What's the weather tomorrow?", False), ("Is there information on same sex marriages?", False),
    ("Nobody told me about the deadline", False), ("sofa delivery times", False), ("", False),
])
def test_a_turn_continues_its_conversation_when_it_replies_or_points_back(question, continues):
    assert conversation_rule.continues(question) is continues


def test_the_requests_earlier_messages_are_left_out_too_when_the_router_places_the_question_nowhere(serving, client, searches):
    conversation_id = chat(client, "my pension", model="auto").json()["switchboard"]["conversation_id"]
    history = [{"role": "user", "content": "my pension"}, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "my pension again"}]
    meta = chat(client, "what about next year?", conversation_id=conversation_id, model="auto", history=history).json()["switchboard"]
    assert meta["abstained"] is True
    assert searches[-1] is None
    assert meta["conversation_search"]["left_out"] == 2


def test_a_zero_context_weight_searches_the_question_alone(serving, client, searches, monkeypatch):
    monkeypatch.setattr(search_conversation, "CONTEXT_WEIGHT", 0.0)
    history = [{"role": "user", "content": "how do I renew my licence"}]
    assert "conversation_search" not in chat(client, "what does renewing my licence cost", model="auto", history=history).json()["switchboard"]
    assert searches[-1] is None


def test_the_conversations_expert_is_kept_when_another_is_only_slightly_better(serving, client, monkeypatch):
    monkeypatch.setattr(conversation_rule, "STICKY_MARGIN", 0.5)
    monkeypatch.setattr(conversation_rule, "CONTEXT_WEIGHT", 0)  # the router ranks the question alone: stickiness decides
    conversation_id = chat(client, "my pension").json()["switchboard"]["conversation_id"]
    response = chat(client, "licence and pension", conversation_id=conversation_id)  # dmv first by ~0.33
    meta = response.json()["switchboard"]
    assert meta["experts"][0]["slug"] == "dmv"
    assert meta["expert"] == "ssa"
    assert meta["sticky"] is True
    assert RoutingEvent.objects.get(request_id=response.json()["id"]).trace["kept_by_conversation"]["from"] == "stored"


def test_a_clearly_better_expert_takes_the_conversation_over(serving, client, monkeypatch):
    monkeypatch.setattr(conversation_rule, "STICKY_MARGIN", 0.15)
    monkeypatch.setattr(conversation_rule, "CONTEXT_WEIGHT", 0)  # the router ranks the question alone: stickiness decides
    conversation_id = chat(client, "my pension").json()["switchboard"]["conversation_id"]
    meta = chat(client, "licence and pension", conversation_id=conversation_id).json()["switchboard"]
    assert (meta["expert"], meta["sticky"]) == ("dmv", False)
    assert Conversation.objects.get(conversation_id=conversation_id).expert == "dmv"


def test_an_unsure_follow_up_is_ranked_with_the_stored_conversations_questions(serving, client, monkeypatch):
    monkeypatch.setattr(conversation_rule, "STICKY_MARGIN", 0.0)  # stickiness alone would hand it to dmv, ranked first alone
    monkeypatch.setattr(conversation_rule, "CONTEXT_BELOW", 0.8)  # "licence and pension" gets ~0.67 alone: unsure under this threshold
    conversation_id = chat(client, "my pension").json()["switchboard"]["conversation_id"]
    meta = chat(client, "licence and pension", conversation_id=conversation_id).json()["switchboard"]
    assert (meta["experts"][0]["slug"], meta["expert"], meta["sticky"]) == ("ssa", "ssa", False)
    assert meta["routing_evidence"]["conversation"]["earlier_turns"] == 1
    assert meta["routing_evidence"]["conversation"]["question_alone"]["expert"] == "dmv"


def test_a_request_that_sends_its_conversation_keeps_the_expert_its_earlier_questions_route_to(serving, client, searches, monkeypatch):
    monkeypatch.setattr(conversation_rule, "STICKY_MARGIN", 0.5)
    monkeypatch.setattr(conversation_rule, "CONTEXT_WEIGHT", 0)  # the question is ranked alone: dmv first by ~0.33
    history = [{"role": "user", "content": "my pension"}, {"role": "assistant", "content": "Sure."}]
    response = chat(client, "licence and pension", model="auto", history=history)
    meta = response.json()["switchboard"]
    assert meta["experts"][0]["slug"] == "dmv"
    assert (meta["expert"], meta["sticky"], meta["conversation_expert"]) == ("ssa", True, "ssa")  # as a stored conversation would
    event = RoutingEvent.objects.get(request_id=response.json()["id"])
    assert event.trace["kept_by_conversation"] == {"expert": "ssa", "from": "earlier_questions", "margin": 0.5}  # the trace says why
    # A follow-up the router abstains on stays with that expert, searched as asked, instead of "No expert covers this question".
    meta = chat(client, "what about next year?", model="auto", history=history).json()["switchboard"]
    assert (meta["abstained"], meta["expert"], meta["sticky"]) == (True, "ssa", True)
    assert searches[-1] is None
    assert meta["conversation_search"]["left_out"] == 1
    # Earlier questions the router places nowhere stand in for nothing.
    meta = chat(client, "what about next year?", model="auto", history=[{"role": "user", "content": "the weather tomorrow"}]).json()["switchboard"]
    assert (meta["abstained"], meta["expert"], meta["conversation_expert"]) == (True, "", None)


def test_a_follow_up_the_router_cannot_place_stays_with_the_conversations_expert(serving, client):
    conversation_id = chat(client, "my pension").json()["switchboard"]["conversation_id"]
    meta = chat(client, "what about next year?", conversation_id=conversation_id).json()["switchboard"]
    assert meta["abstained"] is True
    assert (meta["expert"], meta["sticky"]) == ("ssa", True)


def test_a_conversation_started_with_another_key_is_refused(serving):
    serving_chat.answer("my pension", conversation_id="shared", api_key_id=1)
    with pytest.raises(conversations.ConversationNotAllowed):
        serving_chat.answer("my pension", conversation_id="shared", api_key_id=2)


def test_an_expired_conversation_starts_over_and_is_purged(serving, client, monkeypatch):
    monkeypatch.setattr(conversation_rule, "STICKY_MARGIN", 0.5)
    conversation_id = chat(client, "my pension").json()["switchboard"]["conversation_id"]
    Conversation.objects.filter(conversation_id=conversation_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    meta = chat(client, "licence and pension", conversation_id=conversation_id).json()["switchboard"]
    assert (meta["expert"], meta["sticky"]) == ("dmv", False)  # no memory of ssa any more
    assert Conversation.objects.get(conversation_id=conversation_id).n_turns == 1
    Conversation.objects.filter(conversation_id=conversation_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert conversations.purge_expired() == 1
    assert not Conversation.objects.exists()


@pytest.mark.parametrize(
    ("ranked", "expert", "margin", "expected"),
    [
        ([("a", 0.6), ("b", 0.4)], "b", 0.25, (["b", "a"], True)),
        ([("a", 0.6), ("b", 0.4)], "b", 0.1, (["a", "b"], False)),
        ([("a", 0.6), ("b", 0.4)], "a", 0.25, (["a", "b"], False)),
        ([("a", 0.6), ("b", 0.4)], "", 0.25, (["a", "b"], False)),
        ([("a", 0.6), ("b", 0.4)], "zz", 0.25, (["a", "b"], False)),
    ],
)
def test_sticky_order(ranked, expert, margin, expected):
    order, sticky = conversations.sticky_order([{"slug": s, "score": v} for s, v in ranked], expert, margin)
    assert ([e["slug"] for e in order], sticky) == expected


def test_a_malformed_conversation_id_is_a_400(serving, client):
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "conversation_id": "no spaces allowed"}
    response = client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    assert "conversation_id" in response.json()["error"]["message"]


def test_a_follow_up_whose_earlier_turns_cannot_be_encoded_is_searched_with_their_words(serving, client, searches, monkeypatch):
    from encoders import EncoderUnavailable

    class Down:
        def encode(self, texts, **kwargs):
            raise EncoderUnavailable("the encoder child died")

    def turns_down(*args, **kwargs):
        raise EncoderUnavailable("the encoder child died")

    monkeypatch.setattr(serving_chat, "get_encoder", lambda *a, **k: Down())
    monkeypatch.setattr(serving_chat, "earlier_expert", turns_down)  # the earlier questions' expert cannot be found either
    history = [{"role": "user", "content": "how do I renew my licence"}]
    meta = chat(client, "what does renewing my licence cost", model="auto", history=history).json()["switchboard"]
    assert meta["expert"] == "dmv"
    assert meta["conversation_expert"] is None
    context = searches[-1]
    assert context.turns == ("how do I renew my licence",)
    assert context.vectors is None  # the test router has no context path: the search would have encoded them itself
