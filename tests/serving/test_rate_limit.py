"""Per-key rate limits: a burst over the limit is a clean 429 with Retry-After, other keys unaffected."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from tests.factories import make_key

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_cache():
    cache.clear()
    yield
    cache.clear()


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def test_a_burst_over_the_keys_limit_is_429_with_retry_after(client):
    secret = make_key("small", rate_limit_per_minute=3).secret
    statuses = [client.get("/v1/models", **bearer(secret)).status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    response = client.get("/v1/models", **bearer(secret))
    assert response.status_code == 429
    error = response.json()["error"]
    assert error["type"] == "rate_limit_exceeded"
    assert error["code"] == "rate_limit_exceeded"
    assert "3 requests per minute" in error["message"]
    assert 1 <= int(response["Retry-After"]) <= 60


def test_limits_are_per_key(client):
    small = make_key("small", rate_limit_per_minute=1).secret
    other = make_key("other", rate_limit_per_minute=1).secret
    assert client.get("/v1/models", **bearer(small)).status_code == 200
    assert client.get("/v1/models", **bearer(small)).status_code == 429
    assert client.get("/v1/models", **bearer(other)).status_code == 200


def test_a_zero_limit_means_unlimited(client):
    secret = make_key("unlimited", rate_limit_per_minute=0).secret
    assert {client.get("/v1/models", **bearer(secret)).status_code for _ in range(10)} == {200}


def test_anonymous_callers_are_limited_per_address_when_configured(client, settings):
    settings.CHAT_API_ANON_RATE_PER_MINUTE = 2
    statuses = [client.get("/v1/models").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_anonymous_callers_are_not_limited_by_default(client, settings):
    settings.CHAT_API_ANON_RATE_PER_MINUTE = 0
    assert {client.get("/v1/models").status_code for _ in range(5)} == {200}


def test_an_unreachable_cache_serves_the_request_instead_of_failing(client, monkeypatch):
    from serving.api import auth

    def down(self, name):
        raise ConnectionError("redis is down")

    monkeypatch.setattr(auth.PerKeyRateThrottle, "_count", down)
    secret = make_key("small", rate_limit_per_minute=1).secret
    assert [client.get("/v1/models", **bearer(secret)).status_code for _ in range(3)] == [200, 200, 200]
