"""API keys on the chat-facing API: Bearer keys as OpenAI clients send them, 401 for bad keys, scopes."""

from __future__ import annotations

import json

import pytest

from clients.services import revoke_key
from tests.factories import make_expert, make_key

pytestmark = pytest.mark.django_db


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def chat(client, model: str, **extra):
    body = {"model": model, "messages": [{"role": "user", "content": "How do I renew my license?"}]}
    return client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json", **extra)


def test_a_valid_key_is_accepted(client):
    secret = make_key("front end").secret
    assert client.get("/v1/models", **bearer(secret)).status_code == 200


def test_an_unknown_key_is_401_invalid_api_key_even_when_the_api_is_open(client, settings):
    settings.CHAT_API_REQUIRE_AUTH = False
    response = client.get("/v1/models", **bearer("sk-sb-not-a-real-key"))
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["type"] == "invalid_api_key"
    assert error["code"] == "invalid_api_key"
    assert "Incorrect API key" in error["message"]
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_revoked_key_is_401(client):
    created = make_key("old client")
    revoke_key(created.key)
    response = chat(client, "auto", **bearer(created.secret))
    assert response.status_code == 401
    assert "revoked" in response.json()["error"]["message"]


def test_an_empty_bearer_token_is_401(client):
    response = client.get("/v1/models", HTTP_AUTHORIZATION="Bearer ")
    assert response.status_code == 401


def test_without_credentials_a_locked_api_answers_401_naming_how_to_authenticate(client, settings):
    settings.CHAT_API_REQUIRE_AUTH = True
    response = client.get("/v1/models")
    assert response.status_code == 401
    assert "API key" in response.json()["error"]["message"]
    assert response.json()["error"]["type"] == "authentication_error"


def test_a_locked_api_accepts_a_key_or_a_signed_in_user(client, settings, owner):
    settings.CHAT_API_REQUIRE_AUTH = True
    secret = make_key("front end").secret
    assert client.get("/v1/models", **bearer(secret)).status_code == 200
    # HTTP basic auth of a console user still works (the Basic scheme is not taken for a key).
    import base64

    basic = base64.b64encode(b"owner:correct horse battery staple").decode()
    assert client.get("/v1/models", HTTP_AUTHORIZATION=f"Basic {basic}").status_code == 200


def test_allowed_experts_is_the_keys_scope_within_what_its_user_may_ask():
    from rest_framework.test import APIRequestFactory

    from serving.api.auth import ApiKeyAuthentication, allowed_experts

    make_expert("dmv", "DMV", public=False)
    make_expert("ssa", "SSA", public=False)
    scoped = make_key("scoped", scopes=["ssa"]).secret
    unscoped = make_key("all").secret  # a staff operator's key: every expert
    for secret, expected in ((scoped, {"ssa"}), (unscoped, {"dmv", "ssa"})):
        request = APIRequestFactory().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {secret}")
        _, key = ApiKeyAuthentication().authenticate(request)
        request.auth = key
        assert allowed_experts(request) == expected


def test_a_model_outside_the_keys_scope_is_403(client):
    make_expert("dmv", "DMV", public=False)
    make_expert("ssa", "SSA", public=False)
    secret = make_key("ssa only", scopes=["ssa"]).secret
    response = chat(client, "dmv", **bearer(secret))
    assert response.status_code == 403
    assert response.json()["error"]["type"] in {"permission_error", "permission_denied"}


@pytest.mark.django_db(transaction=True)
def test_the_official_openai_client_sees_auth_and_rate_limit_errors_as_it_expects(live_server):
    import openai
    from django.core.cache import cache

    cache.clear()
    bad = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key="sk-sb-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        bad.models.list()
    assert caught.value.code == "invalid_api_key"
    good = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=make_key("sdk", rate_limit_per_minute=1).secret, max_retries=0)
    assert any(m.id == "auto" for m in good.models.list())
    with pytest.raises(openai.RateLimitError) as limited:
        good.models.list()
    assert int(limited.value.response.headers["retry-after"]) >= 1
