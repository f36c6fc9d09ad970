"""A language model answers; when it cannot, the extractive answer from the same passages does, and the response says so.

The fake router, store and encoder are those of ``tests/support/serving.py``; here the configured
backend is a fake *model* (not the extractive backend), and the extractive fallback is the failover
tests' fake generator, which answers "<expert> says: <first passage> [1]".
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.utils import timezone

from experts.generation import (
    AdapterMismatch,
    GenerationBusy,
    GenerationError,
    GenerationTimeout,
    GenerationUnavailable,
    get_generator,
)
from experts.generation.queue import GenerationQueue
from experts.ml.extractive import Answer
from experts.models import Expert, ExpertVersion
from routing.models import RoutingEvent
from serving import events, expert_answer
from tests.support.serving import FakeModel, chat, event_for, meta_of


def test_the_model_answers_and_the_response_says_so(model_serving, client):
    response = chat(client, "how do I renew my licence", model="auto:fast")
    meta = meta_of(response)
    assert response.json()["choices"][0]["message"]["content"] == "model: The dmv office handles this. [1]"
    assert (meta["answer_source"], meta["fallback_reason"], meta["adapter"]) == ("model", None, None)
    assert meta["citations"][0]["title"] == "dmv guide"
    assert meta["citations"][0]["source"] == "dmv guide"  # the document's title, as indexing stores it
    assert meta["citations"][0]["document_id"] == 1
    assert model_serving["fallback"].calls == []


@pytest.mark.parametrize(("error", "reason"), [(GenerationError, "generator_error"), (GenerationTimeout, "generator_timeout"),
                                               (GenerationUnavailable, "generator_unavailable")])
def test_a_failing_model_is_replaced_by_the_extractive_answer_of_the_same_expert(model_serving, client, error, reason):
    model_serving["model"].fail["*"] = error("the model is down")
    response = chat(client, "how do I renew my licence", model="auto:fast")
    meta = meta_of(response)
    assert response.json()["choices"][0]["message"]["content"] == "dmv says: The dmv office handles this. [1]"
    assert (meta["expert"], meta["answer_source"], meta["fallback_reason"]) == ("dmv", "extractive_fallback", reason)
    assert meta["failover_from"] == []  # the expert itself still answered, from its own passages
    assert model_serving["store"].calls == [["dmv"]]
    from experts.breaker import breaker_for

    assert breaker_for("dmv:generation").snapshot()["failures"] == 1  # the model's breaker, not the expert's
    assert breaker_for("dmv").snapshot()["failures"] == 0


def test_an_open_model_breaker_skips_the_model_and_answers_extractively(model_serving, client, settings):
    settings.BREAKER_FAILURES = 2
    model_serving["model"].fail["*"] = GenerationTimeout("slow")
    for _ in range(2):
        chat(client, "how do I renew my licence", model="auto:fast")
    model_serving["model"].requests.clear()
    meta = meta_of(chat(client, "how do I renew my licence", model="auto:fast"))
    assert (meta["answer_source"], meta["fallback_reason"]) == ("extractive_fallback", "circuit_open")
    assert model_serving["model"].requests == []  # an open breaker costs the slow model nothing


def test_when_the_extractive_answer_fails_too_the_next_expert_answers(model_serving, client):
    model_serving["model"].fail["*"] = GenerationError("down")
    model_serving["fallback"].fail["dmv"] = GenerationError
    meta = meta_of(chat(client, "how do I renew my licence", model="auto:fast"))
    assert meta["expert"] == "ssa"
    assert meta["failover_from"] == [{"slug": "dmv", "reason": "generator_error"}]
    assert (meta["answer_source"], meta["fallback_reason"]) == ("extractive_fallback", "generator_error")


def test_weak_passages_get_not_found_without_asking_the_model(model_serving, client, settings):
    settings.EXTRACTIVE_MIN_SCORE = 0.95  # the fake store's passages score 0.9
    response = chat(client, "how do I renew my licence", model="auto:fast")
    meta = meta_of(response)
    assert response.json()["choices"][0]["message"]["content"] == "I could not find this in the knowledge base."
    assert (meta["answer_source"], meta["grounded"]) == ("not_found", False)
    assert model_serving["model"].requests == []


def _versions(*, previous: bool) -> None:
    dmv = Expert.objects.get(slug="dmv")
    if previous:
        ExpertVersion.objects.create(expert=dmv, version=1, status="archived", system_prompt="v1 prompt", adapter_path="/adapters/dmv-v1",
                                     base_model="tiny", activated_at=timezone.now() - timezone.timedelta(days=2))
    ExpertVersion.objects.create(expert=dmv, version=2, status="active", system_prompt="v2 prompt", adapter_path="/adapters/dmv-v2",
                                 base_model="tiny", activated_at=timezone.now())


def test_a_broken_adapter_is_replaced_by_the_previous_active_versions_adapter(model_serving, client):
    _versions(previous=True)
    model_serving["model"].fail["dmv-v2"] = AdapterMismatch("adapter dmv-v2 was trained on 'llama'")
    meta = meta_of(chat(client, "how do I renew my licence", model="dmv"))
    assert (meta["answer_source"], meta["adapter"], meta["expert_version"], meta["fallback_reason"]) == ("model", "dmv-v1", 1, "adapter_mismatch")
    assert model_serving["model"].requests[-1].system_prompt == "v1 prompt"  # the previous version answers as a whole
    assert event_for(chat(client, "how do I renew my licence", model="dmv").json()["id"]).expert_version == 1


def test_without_a_previous_adapter_the_base_model_answers_with_the_current_prompt(model_serving, client):
    _versions(previous=False)
    model_serving["model"].fail["dmv-v2"] = AdapterMismatch("adapter dmv-v2: folder is damaged")
    meta = meta_of(chat(client, "how do I renew my licence", model="dmv"))
    assert (meta["answer_source"], meta["adapter"], meta["expert_version"], meta["fallback_reason"]) == ("model", None, 2, "adapter_mismatch")
    assert model_serving["model"].requests[-1].system_prompt == "v2 prompt"


def test_when_no_adapter_and_no_base_model_can_answer_the_extractive_answer_does(model_serving, client):
    _versions(previous=True)
    model_serving["model"].fail.update({"dmv-v2": AdapterMismatch("x"), "dmv-v1": AdapterMismatch("y"), "base": GenerationUnavailable("no model")})
    meta = meta_of(chat(client, "how do I renew my licence", model="dmv"))
    assert (meta["answer_source"], meta["adapter"], meta["fallback_reason"]) == ("extractive_fallback", None, "generator_unavailable")


def test_a_fresh_install_without_the_base_model_answers_extractively_and_never_500s(router, store, fake_fallback, no_experiment, client, settings,
                                                                                       tmp_path):
    settings.GENERATOR = "transformers"
    settings.BASE_MODEL = str(tmp_path / "models" / "not-prepared-yet")
    get_generator.cache_clear()
    try:
        response = chat(client, "how do I renew my licence", model="auto:fast")
    finally:
        get_generator.cache_clear()
    meta = meta_of(response)
    assert (meta["answer_source"], meta["fallback_reason"]) == ("extractive_fallback", "generator_unavailable")
    assert response.json()["choices"][0]["message"]["content"] == "dmv says: The dmv office handles this. [1]"


def test_a_streamed_answer_says_who_wrote_it_in_its_first_and_last_chunks(model_serving, client):
    model_serving["model"].fail["*"] = GenerationTimeout("slow")
    response = chat(client, "how do I renew my licence", model="auto:fast", stream=True)
    chunks = [json.loads(b[6:]) for b in b"".join(response.streaming_content).split(b"\n\n") if b.startswith(b"data: {")]
    assert chunks[0]["switchboard"]["answer_source"] == "extractive_fallback"
    assert chunks[-1]["switchboard"]["fallback_reason"] == "generator_timeout"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "dmv says: The dmv office handles this. [1]"


# --- the bounded queue ------------------------------------------------------------------------------


class QueuedModel(FakeModel):
    """A model served one request at a time through a ``GenerationQueue``, like the transformers backend."""

    def __init__(self, max_waiting: int):
        super().__init__()
        self.queue = GenerationQueue(max_waiting)

    def generate(self, request) -> Answer:
        with self.queue.hold(timeout_s=5):
            return super().generate(request)


def test_a_full_generation_queue_is_a_503_with_retry_after_and_routing_still_answers(router, store, fake_fallback, no_experiment, client, monkeypatch):
    slow = QueuedModel(max_waiting=1)
    monkeypatch.setattr(expert_answer, "get_generator", lambda *a, **k: slow)
    slow.queue.acquire()  # a long generation in progress...
    waiter = threading.Thread(target=lambda: slow.queue.acquire(timeout_s=10) or slow.queue.release(), daemon=True)
    waiter.start()  # ...and one request waiting for it: the queue is full
    while slow.queue.waiting < 1:
        time.sleep(0.005)
    try:
        started = time.monotonic()
        response = chat(client, "how do I renew my licence", model="auto:fast")
        assert time.monotonic() - started < 2  # refused at once, not queued behind the model
        assert response.status_code == 503
        assert int(response["Retry-After"]) >= 1
        error = response.json()["error"]
        assert (error["type"], error["code"], error["param"]) == ("service_unavailable", "generation_busy", None)
        events.flush()
        assert RoutingEvent.objects.get(request_id__isnull=False).error_kind == "generation_busy"
        routed = client.post("/api/v1/route", data=json.dumps({"question": "how do I renew my licence"}), content_type="application/json")
        assert routed.status_code == 200  # routing never waits for the model
        assert routed.json()["experts"][0]["slug"] == "dmv"
        assert fake_fallback.calls == []  # busy is not a failure: nothing answered in the model's place
    finally:
        slow.queue.release()
        waiter.join(5)
    assert chat(client, "how do I renew my licence", model="auto:fast").status_code == 200


def test_busy_while_streaming_is_a_plain_503_before_the_first_byte(model_serving, client):
    model_serving["model"].fail["*"] = GenerationBusy("the model is busy", retry_after_s=7)
    response = chat(client, "how do I renew my licence", model="auto:fast", stream=True)
    assert response.status_code == 503
    assert response["Retry-After"] == "7"
    assert response["Content-Type"] == "application/json"
