"""Two teams on one platform: what team A's user, key or an anonymous caller may ask and read of team B's experts.

Team A owns ``dmv``; team B owns ``ssa`` and ``va``; none is public. Each test asks as someone and
checks both the response and what the fake store was asked to search: a B expert searched for A
would leak B's passages even when the answer happened to come from A.
"""

from __future__ import annotations

import base64
import json

import pytest
from django.test import Client

from experts.models import Expert
from routing.models import Feedback
from tests.factories import make_key, make_team, make_user

PASSWORD = "correct horse battery staple"


@pytest.fixture
def teams(serving):
    a, b = make_team("Team A"), make_team("Team B")
    Expert.objects.filter(slug="dmv").update(team=a, public=False)
    Expert.objects.filter(slug__in=["ssa", "va"]).update(team=b, public=False)
    alice = make_user("alice", teams=(a,))
    bob = make_user("bob", teams=(b,))
    for user in (alice, bob):
        user.set_password(PASSWORD)
        user.save()
    return {"a": a, "b": b, "alice": alice, "bob": bob, **serving}


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _ask(client, content, model="auto", **extra):
    body = {"model": model, "messages": [{"role": "user", "content": content}]}
    body.update({k: v for k, v in extra.items() if not k.startswith("HTTP_")})
    headers = {k: v for k, v in extra.items() if k.startswith("HTTP_")}
    return client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json", **headers)


def _bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def _renew(client, secret: str) -> int:
    """The status of asking ``dmv`` to renew a licence with the key ``secret``."""
    return _ask(client, "renew my licence", model="dmv", **_bearer(secret)).status_code


def _searched(fake_store) -> set[str]:
    return {slug for call in fake_store.calls for slug in call}


def _alice_leaves_team_a(teams, client: Client) -> str:
    """Alice's key to ``dmv`` answers until she leaves team A, then ``dmv`` is a 404 to it; returns the key's secret."""
    secret = make_key("alice's front end", created_by=teams["alice"], scopes=["dmv"]).secret
    assert _renew(client, secret) == 200
    teams["alice"].groups.remove(teams["a"])
    assert _renew(client, secret) == 404
    return secret


def test_the_playground_routes_and_searches_only_the_users_own_experts(teams):
    client = _signed_in(teams["alice"])
    response = client.post("/playground/answer/", {"question": "when is my pension paid", "mode": "auto"})
    assert response.status_code == 200
    assert _searched(teams["store"]) == {"dmv"}
    assert b"ssa says" not in response.content
    assert b"SSA" not in response.content


def test_the_playground_offers_no_other_teams_expert_to_ask_directly(teams):
    client = _signed_in(teams["alice"])
    page = client.get("/playground/").content.decode()
    assert 'value="dmv"' in page
    assert 'value="ssa"' not in page
    refused = client.post("/playground/answer/", {"question": "pension", "mode": "ssa"})
    assert refused.status_code == 400
    assert _searched(teams["store"]) == set()


@pytest.mark.parametrize("how", ["session", "basic"])
def test_a_signed_in_user_cannot_name_another_teams_expert_or_see_it_listed(teams, how):
    if how == "session":
        client, auth = _signed_in(teams["alice"]), {}
    else:
        client = Client()
        auth = {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()}
    refused = _ask(client, "when is my pension paid", model="ssa", **auth)
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "model_not_found"
    assert "ssa" not in refused.json()["error"]["message"].replace("'ssa'", "")
    assert "va" not in refused.json()["error"]["message"].split(":")[-1]
    models = [m["id"] for m in client.get("/v1/models", **auth).json()["data"]]
    assert "dmv" in models
    assert "ssa" not in models
    assert "va" not in models
    routed = _ask(client, "when is my pension paid", **auth)
    assert routed.status_code == 200
    assert {e["slug"] for e in routed.json()["switchboard"]["experts"]} <= {"dmv"}
    assert _searched(teams["store"]) <= {"dmv"}


def test_an_anonymous_caller_asks_public_experts_only(teams, settings):
    settings.CHAT_API_REQUIRE_AUTH = False
    client = Client()
    assert _ask(client, "pension", model="ssa").status_code == 404
    assert _ask(client, "pension").status_code == 403
    assert [m["id"] for m in client.get("/v1/models").json()["data"] if not m["id"].startswith("auto")] == []
    assert _searched(teams["store"]) == set()
    Expert.objects.filter(slug="ssa").update(public=True)
    answered = _ask(client, "when is my pension paid")
    assert answered.status_code == 200
    assert answered.json()["switchboard"]["expert"] == "ssa"
    assert _searched(teams["store"]) == {"ssa"}


def test_a_key_stops_reaching_a_team_its_user_left_and_stops_working_when_the_user_is_deactivated(teams):
    alice, client = teams["alice"], Client()
    secret = _alice_leaves_team_a(teams, client)
    assert "dmv" not in [m["id"] for m in client.get("/v1/models", **_bearer(secret)).json()["data"]]
    alice.is_active = False
    alice.save()
    assert _renew(client, secret) == 401


def test_a_key_scoped_to_an_expert_that_moved_to_another_team_no_longer_reaches_it(teams):
    secret = make_key("alice's front end", created_by=teams["alice"], scopes=["dmv"]).secret
    Expert.objects.filter(slug="dmv").update(team=teams["b"])
    refused = _ask(Client(), "renew my licence", model="dmv", **_bearer(secret))
    assert refused.status_code == 404
    assert _searched(teams["store"]) == set()


def test_a_scoped_keys_unknown_model_error_names_only_what_it_may_ask(teams):
    secret = make_key("alice's front end", created_by=teams["alice"], scopes=["dmv"]).secret
    message = _ask(Client(), "x", model="nope", **_bearer(secret)).json()["error"]["message"]
    assert "dmv" in message
    assert "ssa" not in message
    assert "va," not in message
    assert not message.endswith("va")


def test_another_principals_conversation_cannot_be_continued_or_overwritten(teams):
    bob = _signed_in(teams["bob"])
    first = _ask(bob, "when is my pension paid").json()
    conversation = first["switchboard"]["conversation_id"]
    teams["store"].calls.clear()
    secret = make_key("alice's front end", created_by=teams["alice"], scopes=["dmv"]).secret
    for caller, auth in ((Client(), _bearer(secret)), (_signed_in(teams["alice"]), {}), (Client(), {})):
        refused = _ask(caller, "renew my licence", conversation_id=conversation, **auth)
        assert refused.status_code == 403, refused.content
    assert _searched(teams["store"]) == set()
    again = _ask(bob, "and my pension?", conversation_id=conversation)
    assert again.status_code == 200
    assert again.json()["switchboard"]["conversation_expert"] == "ssa"


def test_feedback_is_only_for_the_principals_own_responses(teams, settings):
    settings.CHAT_API_REQUIRE_AUTH = False
    bob = _signed_in(teams["bob"])
    response_id = _ask(bob, "when is my pension paid").json()["id"]
    secret = make_key("alice's front end", created_by=teams["alice"], scopes=["dmv"]).secret
    for caller, auth in ((Client(), _bearer(secret)), (Client(), {}), (_signed_in(teams["alice"]), {})):
        refused = caller.post("/api/v1/feedback", data=json.dumps({"response_id": response_id, "rating": "down", "comment": "planted"}),
                              content_type="application/json", **auth)
        assert refused.status_code == 404, refused.content
    assert not Feedback.objects.exists()
    own = bob.post("/api/v1/feedback", data=json.dumps({"response_id": response_id, "rating": "up"}), content_type="application/json")
    assert own.status_code == 201


def test_feedback_cannot_suggest_an_expert_the_caller_may_not_ask(teams):
    alice = _signed_in(teams["alice"])
    response_id = _ask(alice, "renew my licence").json()["id"]
    body = {"response_id": response_id, "rating": "down", "suggested_expert": "ssa"}
    refused = alice.post("/api/v1/feedback", data=json.dumps(body), content_type="application/json")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "unknown_expert"
    assert not Feedback.objects.exists()


def test_metrics_are_served_to_this_machine_or_to_a_token_only(teams, settings):
    settings.METRICS_TOKEN = ""
    assert Client(REMOTE_ADDR="203.0.113.9").get("/metrics").status_code == 403
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200
    settings.METRICS_TOKEN = "scrape-me"
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 401
    assert Client(REMOTE_ADDR="203.0.113.9").get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").status_code == 200


def test_with_the_serving_caches_on_a_change_of_team_or_user_applies_at_once(teams, settings):
    settings.SERVING_CACHE_TTL_S = 60.0
    alice, client = teams["alice"], Client()
    secret = _alice_leaves_team_a(teams, client)
    alice.groups.add(teams["a"])
    assert _renew(client, secret) == 200
    signed_in = _signed_in(alice)
    assert _ask(signed_in, "when is my pension paid", model="ssa").status_code == 404
    alice.is_staff = True
    alice.save()
    assert _ask(signed_in, "when is my pension paid", model="ssa").status_code == 200
