"""Bad input and missing state on the serving endpoints: a 4xx or 503 that says what is wrong, never a 500."""

import json

import pytest

pytestmark = pytest.mark.django_db


def post(client, path, body, **extra):
    return client.post(path, data=body if isinstance(body, str | bytes) else json.dumps(body), content_type="application/json", **extra)


def test_chat_before_any_router_is_trained_is_503_with_a_reason(client):
    response = post(client, "/v1/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": "hello"}]})
    assert response.status_code == 503
    assert "no router has been trained" in response.json()["error"]["message"]


def test_route_before_any_router_is_trained_is_503(client):
    response = post(client, "/api/v1/route", {"question": "hello"})
    assert response.status_code == 503


def test_an_unknown_expert_is_404_naming_the_choices(client):
    response = post(client, "/v1/chat/completions", {"model": "legal", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["param"] == "model"
    assert "auto" in error["message"]


def test_a_body_over_the_upload_limit_is_413(client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = post(client, "/v1/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": "x" * 5000}]})
    assert response.status_code == 413
    assert "too large" in response.json()["error"]["message"]


def test_streaming_is_refused_clearly_for_now(client):
    response = post(client, "/v1/chat/completions", {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "stream"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({}, "question"),
        ({"question": ""}, "question"),
        ({"question": "hi", "top_k": 9}, "top_k"),
        ("[]", ""),
        ("{oops", "Malformed"),
    ],
)
def test_bad_route_requests_are_400(client, body, fragment):
    response = post(client, "/api/v1/route", body)
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]


def test_wrong_method_is_405_with_the_error_shape(client):
    response = client.get("/v1/chat/completions")
    assert response.status_code == 405
    assert "error" in response.json()
