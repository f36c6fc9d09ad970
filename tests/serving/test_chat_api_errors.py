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


def test_a_ten_megabyte_body_is_413_with_the_openai_error_keys(client):
    response = post(client, "/v1/chat/completions", b'{"model": "auto", "messages": [{"role": "user", "content": "' + b"x" * 10_000_000 + b'"}]}')
    assert response.status_code == 413
    assert set(response.json()["error"]) >= {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"model": "auto", "messages": [{"role": "user", "content": 42}]}, "content must be a string or a list"),
        ({"model": "auto", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "'image_url' are not supported"),
        ({"model": "auto", "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "needs a string 'text'"),
        ({"model": "auto", "messages": [{"role": "user", "content": ["hi"]}]}, "must be an object"),
        ({"model": "auto", "messages": [{"role": "user", "content": [{"type": "text", "text": "  "}]}]}, "empty"),
        ({"model": 5, "messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": "auto", "stream": "yes please", "messages": [{"role": "user", "content": "hi"}]}, "stream"),
        ({"model": "auto", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, "temperature"),
        ({"model": "auto", "messages": [{"role": "user", "content": "hi"}], "stream_options": "usage"}, "stream_options"),
        ({"model": "auto", "messages": [{"role": "user", "content": "hi"}], "metadata": {"conversation_id": "a b"}}, "conversation_id"),
        ({"model": "auto", "messages": [{"content": "hi"}]}, "role"),
        ({"model": "auto", "messages": [{"role": "user", "content": "hi"}], "n": 2}, "one answer per request"),
    ],
)
def test_wrong_types_and_unsupported_content_are_400_in_openais_shape(client, body, fragment):
    response = post(client, "/v1/chat/completions", body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"
    assert set(error) >= {"message", "type", "param", "code"}


def test_an_unknown_model_has_openais_code(client):
    response = post(client, "/v1/chat/completions", {"model": "legal", "messages": [{"role": "user", "content": "hi"}]})
    assert response.json()["error"]["code"] == "model_not_found"


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
