"""``stream: true``: OpenAI's server-sent chunk format, errors before and after the first byte, a client that leaves halfway.

Both request paths are exercised: Django's WSGI test client (a sync iterator) and its ASGI test
client (the async iterator uvicorn consumes); tests/routing/test_openai_client.py covers a real
uvicorn server.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import AsyncClient

from experts.generation import GenerationError
from routing.models import RoutingEvent
from serving import events

BODY = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "how do I renew my licence"}]}


def post(client, body=BODY):
    return client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")


def recorded(request_id: str) -> tuple[int, str]:
    """The status code and error kind of the request's routing event, once the writer has flushed."""
    events.flush()
    event = RoutingEvent.objects.get(request_id=request_id)
    return event.status_code, event.error_kind


def parse(raw: bytes) -> list:
    """The SSE ``data:`` payloads, JSON-decoded except the final ``[DONE]``."""
    out = []
    for block in raw.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_a_stream_has_a_role_chunk_content_deltas_a_finish_chunk_with_metadata_then_done(serving, client):
    response = post(client)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["x-switchboard-expert"] == "dmv"
    assert response["x-switchboard-routing-path"] == "dmv,ssa"
    conversation = response["x-switchboard-conversation"]
    chunks = parse(b"".join(response.streaming_content))
    assert chunks[-1] == "[DONE]"
    first, *middle, last = chunks[:-1]
    assert {c["object"] for c in chunks[:-1]} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks[:-1]}) == 1
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["switchboard"]["expert"] == "dmv"
    assert first["switchboard"]["expert_name"] == "DMV"  # the expert's display name, for a front end's "answered by"
    assert first["switchboard"]["conversation_id"] == conversation
    text = "".join(c["choices"][0]["delta"]["content"] for c in middle)
    assert text == "dmv says: The dmv office handles this. [1]"
    assert len(middle) > 3  # really streamed in pieces
    assert all(c["choices"][0]["finish_reason"] is None for c in middle)
    assert last["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assert last["switchboard"]["citations"][0]["expert"] == "dmv"
    assert "usage" not in last
    events.flush()
    event = RoutingEvent.objects.get(request_id=first["id"])
    assert (event.status_code, event.expert, event.error_kind) == (200, "dmv", "")


def test_include_usage_adds_a_usage_chunk_before_done(serving, client):
    response = post(client, {**BODY, "stream_options": {"include_usage": True}})
    chunks = parse(b"".join(response.streaming_content))
    usage = chunks[-2]
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 8  # words of "dmv says: The dmv office handles this. [1]"
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 8


def test_a_routing_error_before_the_first_byte_is_a_plain_json_error(db, client):
    response = post(client)
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert "no router has been trained" in response.json()["error"]["message"]


def test_every_expert_down_while_streaming_is_a_plain_503(serving, client):
    serving["store"].down = {"dmv", "ssa", "va"}
    response = post(client)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_expert_available"


def test_a_generator_failing_before_its_first_delta_fails_over_inside_the_stream(serving, client):
    serving["generator"].fail["dmv"] = GenerationError
    response = post(client)
    chunks = parse(b"".join(response.streaming_content))
    assert chunks[0]["switchboard"]["expert"] == "ssa"
    assert chunks[0]["switchboard"]["failover_from"] == [{"slug": "dmv", "reason": "generator_error"}]
    assert response["x-switchboard-expert"] == "ssa"


def test_a_failure_after_streaming_began_sends_an_error_event_then_done_and_is_recorded(serving, client):
    serving["generator"].fail_after = 3
    response = post(client)
    assert response.status_code == 200
    chunks = parse(b"".join(response.streaming_content))
    assert chunks[-1] == "[DONE]"
    assert chunks[-2]["error"]["code"] == "generator_error"
    assert "failed mid-answer" in chunks[-2]["error"]["message"]
    assert recorded(chunks[0]["id"]) == (502, "generator_error")


def test_a_client_leaving_halfway_closes_the_backend_stream_and_records_a_cancelled_event(serving, client):
    response = post(client)
    parts = iter(response.streaming_content)
    first = parse(next(parts))[0]
    next(parts)
    assert serving["generator"].closed == []
    response.close()  # what the WSGI server does when the client is gone
    assert serving["generator"].closed == ["dmv"]
    assert recorded(first["id"]) == (499, "client_cancelled")


def test_a_stream_through_the_asgi_handler_is_an_async_iterator_in_the_same_format(serving):
    async def run():
        response = await post(AsyncClient())
        assert response.is_async
        return response, b"".join([part async for part in response.streaming_content])

    response, raw = async_to_sync(run)()
    chunks = parse(raw)
    assert response["x-switchboard-expert"] == "dmv"
    assert chunks[-1] == "[DONE]"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1]) == "dmv says: The dmv office handles this. [1]"


def test_an_asgi_client_leaving_halfway_is_recorded_as_cancelled(serving):
    """Django's ASGI handler cancels the response task on ``http.disconnect``; the model is mid-answer then."""
    gen = serving["generator"]
    gen.gate = threading.Event()

    async def run():
        response = await post(AsyncClient())
        chunks: list[bytes] = []

        async def consume():
            async for part in response.streaming_content:
                chunks.append(part)

        task = asyncio.create_task(consume())
        while len(chunks) < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the stream now waits on the model, in the request's thread
        task.cancel()
        gen.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return parse(chunks[0])[0]

    first = async_to_sync(run)()
    assert gen.closed == ["dmv"]
    assert recorded(first["id"]) == (499, "client_cancelled")


def test_closing_an_asgi_stream_before_any_chunk_still_records_the_request(serving):
    async def run():
        response = await post(AsyncClient())
        await sync_to_async(response.close)()  # Django closes the response; nothing was ever pulled
        return response["x-switchboard-request-id"]

    request_id = async_to_sync(run)()
    events.flush()
    assert RoutingEvent.objects.get(request_id=request_id).error_kind == "client_cancelled"


@pytest.mark.parametrize("include", [True, False])
def test_a_non_streaming_request_is_unchanged_by_stream_options(serving, client, include):
    body = {**BODY, "stream": False, "stream_options": {"include_usage": include}}
    response = post(client, body)
    assert response.status_code == 200
    assert response.json()["object"] == "chat.completion"


@pytest.mark.parametrize(
    ("model", "question", "expected"),
    [
        ("auto:accurate", "licence and pension", "DMV (dmv): dmv says: The dmv office handles this. [1]\n\nSSA (ssa): ssa says: The ssa office handles this. [2]"),
        ("auto", "what is the meaning of life", "No expert covers this question."),
    ],
)
def test_answers_made_whole_are_streamed_in_pieces_too(serving, client, model, question, expected):
    response = post(client, {**BODY, "model": model, "messages": [{"role": "user", "content": question}]})
    chunks = parse(b"".join(response.streaming_content))
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1]) == expected
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
