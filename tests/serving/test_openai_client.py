"""The official ``openai`` Python package against a live uvicorn server (ASGI) serving the bundled demo.

uvicorn runs in a thread of the test process, so it shares the test database (the demo fixture
commits its rows); the client authenticates with a real API key made for the module.
"""

from __future__ import annotations

import socket
import threading
import time

import httpx
import openai
import pytest

from tests.factories import make_key

RETIREMENT = "How do I apply for retirement benefits?"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database, even when no test of the run is marked ``django_db``.

    This module's tests use the database only through the live server and are not marked: a
    transaction around them would lock the server out of the shared SQLite database. pytest-django
    creates the database only for marked tests, so when this module runs alone it is created here.
    """
    from django.db import connection
    from django.test.utils import setup_databases

    with django_db_blocker.unblock():
        if "jobs_job" not in connection.introspection.table_names():
            setup_databases(verbosity=0, interactive=False, aliases={"default"})


@pytest.fixture(scope="module")
def live(demo, django_db_blocker):
    """(base URL, API key secret, revoked key secret, another key's secret) of a uvicorn server over the demo."""
    import uvicorn
    from django.core.asgi import get_asgi_application

    from clients.services import revoke_key

    with django_db_blocker.unblock():
        key = make_key("openai client test")
        revoked = make_key("revoked")
        revoke_key(revoked.key)
        other = make_key("another client")
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(get_asgi_application(), host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", key.secret, revoked.secret, other.secret
        server.should_exit = True
        thread.join(10)
        assert not thread.is_alive()


@pytest.fixture
def client(live):
    base, secret, *_ = live
    with openai.OpenAI(base_url=f"{base}/v1", api_key=secret, max_retries=0, timeout=60) as c:
        yield c


def test_a_plain_completion_with_routing_metadata_in_the_body_and_headers(client):
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=[{"role": "user", "content": RETIREMENT}])
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content
    meta = completion.model_extra["switchboard"]
    assert meta["experts"][0]["slug"] == "ssa"
    assert raw.headers["x-switchboard-expert"] == meta["expert"]
    assert raw.headers["x-switchboard-conversation"] == meta["conversation_id"]
    assert completion.usage.completion_tokens > 0


def test_a_streamed_completion_arrives_as_chunks_with_metadata_and_usage(client):
    stream = client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": RETIREMENT}], stream=True, stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].model_extra["switchboard"]["experts"][0]["slug"] == "ssa"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) > 5
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finish] == ["stop"]
    meta = finish[0].model_extra["switchboard"]
    if meta["grounded"]:
        assert "[1]" in text
        assert meta["citations"]
    assert chunks[-1].usage.completion_tokens == len(text.split())


def test_a_conversation_id_passed_as_an_extension_continues_the_conversation(client):
    first = client.chat.completions.create(model="auto", messages=[{"role": "user", "content": RETIREMENT}])
    conversation_id = first.model_extra["switchboard"]["conversation_id"]
    second = client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "And can I still work while receiving them?"}],
        extra_body={"conversation_id": conversation_id},
    )
    meta = second.model_extra["switchboard"]
    assert meta["conversation_id"] == conversation_id
    assert meta["context_turns"] >= 0


def test_accurate_mode_and_the_model_list(client):
    ids = [m.id for m in client.models.list().data]
    assert ids[:3] == ["auto", "auto:fast", "auto:accurate"]
    assert {"dmv", "ssa", "studentaid", "va"} <= set(ids)
    completion = client.chat.completions.create(model="auto:accurate", messages=[{"role": "user", "content": RETIREMENT}])
    parts = completion.model_extra["switchboard"]["parts"]
    assert 1 <= len(parts) <= 2
    content = completion.choices[0].message.content
    for part in parts:  # each expert's part is labelled with its slug
        assert f"({part['expert']}): " in content


def test_errors_surface_as_the_clients_own_exceptions(client, live):
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="legal", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="auto", messages=[])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="auto", messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    base, _, revoked, _ = live
    with openai.OpenAI(base_url=f"{base}/v1", api_key=revoked, max_retries=0) as other, pytest.raises(openai.AuthenticationError):
        other.chat.completions.create(model="auto", messages=[{"role": "user", "content": RETIREMENT}])


def test_feedback_on_a_streamed_answer_by_its_id_from_the_key_that_asked_only(client, live):
    base, secret, _, other = live
    chunks = list(client.chat.completions.create(model="auto:fast", messages=[{"role": "user", "content": RETIREMENT}], stream=True))
    body = {"response_id": chunks[0].id, "rating": "up"}
    # The event was recorded with the calling key: another key cannot even see the response.
    stranger = httpx.post(f"{base}/api/v1/feedback", json=body, headers={"Authorization": f"Bearer {other}"}, timeout=30)
    assert stranger.status_code == 404
    response = httpx.post(f"{base}/api/v1/feedback", json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    assert response.status_code == 201, response.text
    assert response.json()["expert"] == chunks[0].model_extra["switchboard"]["expert"]

