"""The playground's streamed answer: who answers first, the words as they come, then the whole panel; refusals as the panel."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from experts.generation import GenerationBusy
from serving import chat, route
from serving.chat import Source
from tests.support.chat_results import fake_result

pytestmark = pytest.mark.django_db


class FakeTurn:
    """What ``chat.open_stream`` returns: the expert, who writes, the deltas, then ``result``."""

    def __init__(self, result: chat.ChatResult, deltas: list[str], fail_after: int | None = None):
        self.expert, self.source = result.expert, Source(answer_source=result.answer_source or "model")
        self._result, self.deltas, self.fail_after = result, deltas, fail_after
        self.result = None
        self.closed = False

    def __iter__(self):
        for i, delta in enumerate(self.deltas):
            if self.fail_after is not None and i >= self.fail_after:
                raise route.StreamInterrupted("generator_error", "expert 'dmv' failed mid-answer: the model crashed")
            yield delta
        self.result = self._result

    def close(self):
        self.closed = True


def events(response) -> list[tuple[str, dict]]:
    assert response["Content-Type"].startswith("text/event-stream")
    out = []
    for block in b"".join(response.streaming_content).decode().split("\n\n"):
        if block.strip():
            name, data = block.split("\n")
            out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def ask(console, question="How do I renew?", mode="auto"):
    return console.post(reverse("console-playground-stream"), {"question": question, "mode": mode})


def test_the_answer_streams_word_by_word_then_the_whole_panel_replaces_it(console, experts, monkeypatch):
    result = fake_result()
    result.answer_source, result.fallback_reason = "extractive_fallback", "generator_timeout"
    turn = FakeTurn(result, ["You ", "can ", "renew ", "online. [1]"])
    calls = []
    monkeypatch.setattr(chat, "open_stream", lambda question, model="auto", **_: calls.append((question, model)) or turn)

    stream = events(ask(console, mode="auto:fast"))

    assert calls == [("How do I renew?", "auto:fast")]
    assert stream[0] == ("meta", {"expert": "dmv", "expert_name": "Motor Vehicles", "answer_source": "extractive_fallback"})
    assert [data["text"] for name, data in stream if name == "delta"] == ["You ", "can ", "renew ", "online. [1]"]
    name, done = stream[-1]
    assert name == "done"
    assert 'id="playground"' in done["html"]
    assert 'id="cite-1"' in done["html"]
    assert "Router v3" in done["html"]
    assert "The model could not answer (generator timeout)" in done["html"]
    assert "extractive fallback" in done["html"]
    assert turn.closed  # the response's end closes the turn (its event is recorded once)


def test_a_failure_mid_answer_is_an_error_event(console, experts, monkeypatch):
    monkeypatch.setattr(chat, "open_stream", lambda question, model="auto", **_: FakeTurn(fake_result(), ["You ", "can "], fail_after=1))
    stream = events(ask(console))
    assert [name for name, _ in stream] == ["meta", "delta", "error"]
    assert "failed mid-answer" in stream[-1][1]["message"]


def test_form_errors_come_back_as_the_panel(console, monkeypatch):
    monkeypatch.setattr(chat, "open_stream", lambda *a, **k: pytest.fail("open_stream() must not be called"))
    response = ask(console, question="  ")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert b"Please enter a question." in response.content


@pytest.mark.parametrize(("error", "shown"), [
    (route.RoutingUnavailable("no router has been trained yet"), b"Routing is not available yet."),
    (route.AllExpertsDown([{"slug": "dmv", "reason": "store_unavailable"}]), b"No expert could answer."),
    (GenerationBusy("the model is busy", retry_after_s=9), b"Try again in 9 s."),
])
def test_a_question_that_cannot_be_answered_now_is_a_503_panel(console, experts, monkeypatch, error, shown):
    def refuse(question, model="auto", **_):
        raise error

    monkeypatch.setattr(chat, "open_stream", refuse)
    response = ask(console)
    assert response.status_code == 503
    assert shown in response.content
    if isinstance(error, GenerationBusy):
        assert response["Retry-After"] == "9"


def test_the_htmx_endpoint_shows_the_same_refusals(console, experts, monkeypatch):
    def busy(question, model="auto", **_):
        raise GenerationBusy("the model is busy", retry_after_s=4)

    monkeypatch.setattr(chat, "answer", busy)
    response = console.post(reverse("console-playground-answer"), {"question": "q", "mode": "auto"}, headers={"HX-Request": "true"})
    assert response.status_code == 503
    assert b"Try again in 4 s." in response.content


def test_the_form_names_its_streaming_endpoint(console, experts):
    html = console.get(reverse("console-playground")).content.decode()
    assert 'data-stream-url="/playground/stream/"' in html
    assert "js/playground.js" in html


def test_anonymous_callers_are_sent_to_sign_in(client):
    response = client.post(reverse("console-playground-stream"), {"question": "hi"})
    assert response.status_code == 302


def test_under_asgi_the_stream_is_an_async_iterator_so_uvicorn_sends_each_word_as_it_comes(experts, owner, monkeypatch):
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    monkeypatch.setattr(chat, "open_stream", lambda question, model="auto", **_: FakeTurn(fake_result(), ["You ", "can ", "renew."]))

    async def run():
        client = AsyncClient()
        await client.aforce_login(owner)
        response = await client.post(reverse("console-playground-stream"), {"question": "How do I renew?", "mode": "auto"})
        return response, [part async for part in response.streaming_content]

    response, parts = async_to_sync(run)()
    assert response.is_async
    assert [p.decode().split("\n")[0] for p in parts] == ["event: meta", "event: delta", "event: delta", "event: delta", "event: done"]
