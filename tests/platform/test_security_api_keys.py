"""API keys: stored hashed only, never logged, and scoped to the experts they name."""

from __future__ import annotations

import json

import pytest

from clients.models import ApiKey
from clients.services import hash_key
from sbcommon.logfilters import mask
from tests.factories import make_expert, make_key


@pytest.fixture
def experts(db):
    return make_expert("alpha-desk", "Alpha", public=False), make_expert("beta-desk", "Beta", public=False)


def test_only_the_hash_of_a_key_is_stored(experts):
    created = make_key("front end", scopes=["alpha-desk"])
    stored = json.dumps(list(ApiKey.objects.values()), default=str)
    assert created.secret not in stored
    assert ApiKey.objects.get().key_hash == hash_key(created.secret)


def test_a_key_never_reaches_the_logs():
    created_secret = "sk-sb-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
    assert created_secret not in mask(f"auth failed for Bearer {created_secret}")


def test_a_key_scoped_to_one_expert_cannot_ask_another(client, experts, settings):
    settings.CHAT_API_REQUIRE_AUTH = True
    created = make_key("front end", scopes=["alpha-desk"])
    body = {"model": "beta-desk", "messages": [{"role": "user", "content": "hello there"}]}
    response = client.post("/v1/chat/completions", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {created.secret}")
    assert response.status_code == 403
    assert response.json()["error"]["message"]


def test_a_wrong_key_is_refused_with_401(client, experts, settings):
    settings.CHAT_API_REQUIRE_AUTH = True
    body = {"model": "auto", "messages": [{"role": "user", "content": "hello there"}]}
    response = client.post("/v1/chat/completions", body, content_type="application/json", HTTP_AUTHORIZATION="Bearer sk-sb-not-a-real-key-000000")
    assert response.status_code == 401
