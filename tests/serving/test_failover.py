"""Failover through circuit breakers: a failing expert's store or generator hands the question to the next-ranked expert.

The fixtures here (a hand-built router over three experts, a keyword encoder, a fake store and a
fake generator whose failures each test chooses) are shared by the other chat-API test modules:
every decision is known in advance and nothing needs a model or a vector store.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from django.core.cache import caches

from encoders import embedding_space
from experts.generation import GenerationError, GenerationTimeout, stream_by_words
from experts.ml.extractive import NOT_FOUND, Answer
from experts.models import Expert
from knowledge.stores import Hit, StoreUnavailable
from routing.experiments.assignment import ArmAssignment
from routing.ml.router import RouterNet
from routing.models import RouterVersion, RoutingEvent
from serving import accurate, events, expert_answer, route
from serving import chat as serving_chat

DIM = 8
EXPERTS = ["dmv", "ssa", "va"]
KEYWORDS = {"licence": 0, "pension": 1, "veteran": 2}


class FakeEncoder:
    """Keywords point along their expert's axis; "A and B" leans a little towards A; anything else points nowhere known."""

    name = "fake"
    dimension = DIM

    def __init__(self):
        self.seen: list[str] = []  # every text encoded, in order

    def encode(self, texts, batch_size=64):
        self.seen.extend(texts)
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            axes = [axis for word, axis in KEYWORDS.items() if word in text]
            out[i, axes or [7]] = 1.0
            if "and" in text.split() and len(axes) == 2:
                out[i, axes[0]] = 1.05
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class FakeStore:
    """``knowledge.search_experts`` stand-in: one passage per searched expert, in the order asked; ``down`` experts raise."""

    def __init__(self):
        self.down: set[str] = set()
        self.calls: list[list[str]] = []

    def __call__(self, experts, question, limit=5, weights=None, query_vector=None, **kwargs):
        slugs = [e.slug for e in experts]
        self.calls.append(slugs)
        if self.down & set(slugs):
            raise StoreUnavailable("qdrant is unreachable")
        return [
            Hit(id=f"{slug}-1", score=1.0 - 0.1 * i, dense_score=0.9 - 0.1 * i,
                payload={"text": f"The {slug} office handles this.", "title": f"{slug} guide", "expert": slug, "document_id": i + 1})
            for i, slug in enumerate(slugs)
        ]


class FakeGenerator:
    """Answers "<expert> says: <first passage> [1]"; ``fail`` maps an expert to the exception it raises.

    ``fail_after`` (words) makes ``stream`` raise midway; ``gate`` (a threading.Event) holds the stream
    after its second word until set, like a slow model; every stream's closing is recorded in ``closed``.

    It stands in for the configured backend of the test settings, the extractive one (hence its
    name): a failure then has nothing to fall back to but the next expert. The model backend's
    fallback to the extractive answer is tested in test_generation_fallback.py.
    """

    name = "extractive"

    def __init__(self):
        self.fail: dict[str, type[Exception]] = {}
        self.fail_after: int | None = None
        self.gate: threading.Event | None = None
        self.calls: list[str] = []
        self.requests: list = []
        self.closed: list[str] = []

    def generate(self, request) -> Answer:
        self.calls.append(request.expert)
        self.requests.append(request)
        if request.expert in self.fail:
            raise self.fail[request.expert](f"{request.expert} backend is down")
        if not request.passages:
            return Answer(text=NOT_FOUND, citations=[], grounded=False)
        first = request.passages[0]
        return Answer(text=f"{request.expert} says: {first.text} [1]", citations=[first], grounded=True)

    def stream(self, request) -> Iterator[str | Answer]:
        answer = self.generate(request)
        try:
            for i, item in enumerate(stream_by_words(answer, words_per_chunk=1)):
                if self.gate is not None and i >= 2:
                    self.gate.wait(10)
                if self.fail_after is not None and i >= self.fail_after:
                    raise GenerationError("the backend dropped the connection")
                yield item
        finally:
            self.closed.append(request.expert)


@pytest.fixture
def encoder(monkeypatch):
    fake = FakeEncoder()
    monkeypatch.setattr(route, "get_encoder", lambda *a, **k: fake)
    monkeypatch.setattr(serving_chat, "get_encoder", lambda *a, **k: fake)
    return fake


@pytest.fixture
def router(tmp_path, settings, encoder, db):
    """An active router over dmv/ssa/va (one prototype per axis), abstaining below similarity 0.5; breakers start closed."""
    settings.ROUTER_DIR = tmp_path
    settings.ROUTER_LOAD_WINDOW = 10
    settings.ROUTER_LOAD_PENALTY = 0.0
    settings.ROUTER_CAPACITY = 1.0
    settings.EVENTS_SYNC = True
    for slug in EXPERTS:
        Expert.objects.create(slug=slug, name=slug.upper(), public=True)
    torch.manual_seed(0)
    model = RouterNet(input_dim=DIM, n_experts=3, use_conv=False, hidden_dim=128, prototypes_per_expert=1, prototype_weight=20.0)
    with torch.no_grad():
        model.gate[-1].weight.zero_()
        model.gate[-1].bias.zero_()
    model.set_prototypes([torch.eye(DIM)[i : i + 1] for i in range(3)])
    model.save(tmp_path / "v1")
    route._router_cache.clear()
    caches[settings.BREAKER_CACHE].clear()
    version = RouterVersion.objects.create(  # trained, as far as serving can tell, on the vectors the encoder makes now
        version=1, path=str(tmp_path / "v1"), experts=EXPERTS, embedding_model=embedding_space(), data_fingerprint="test",
        metrics={"abstain_threshold": 0.5}, is_active=True,
    )
    yield version
    route._router_cache.clear()
    caches[settings.BREAKER_CACHE].clear()


@pytest.fixture
def store(monkeypatch):
    fake = FakeStore()
    monkeypatch.setattr(serving_chat.knowledge, "search_experts", fake)
    return fake


@pytest.fixture
def generator(monkeypatch):
    fake = FakeGenerator()
    monkeypatch.setattr(expert_answer, "get_generator", lambda *a, **k: fake)
    return fake


@pytest.fixture
def no_experiment(monkeypatch):
    monkeypatch.setattr(serving_chat, "assign", lambda subject: None)


@pytest.fixture
def serving(router, store, generator, no_experiment):
    """Everything a chat request needs, faked at the boundaries (model, store, backend)."""
    return {"router": router, "store": store, "generator": generator}


def chat(client, content, model="auto", **extra):
    body = {"model": model, "messages": [{"role": "user", "content": content}], **extra}
    return client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")


def event_for(request_id: str) -> RoutingEvent:
    events.flush()
    return RoutingEvent.objects.get(request_id=request_id)


# --- the tests ----------------------------------------------------------------------------------

def test_when_the_first_experts_generator_fails_the_next_ranked_expert_answers(serving, client):
    serving["generator"].fail["dmv"] = GenerationError
    response = chat(client, "how do I renew my licence", model="auto:fast")
    assert response.status_code == 200, response.content
    meta = response.json()["switchboard"]
    assert meta["expert"] == "ssa"
    assert meta["fallback_used"] is True
    assert meta["failover_from"] == [{"slug": "dmv", "reason": "generator_error"}]
    assert response["x-switchboard-expert"] == "ssa"
    assert response.json()["choices"][0]["message"]["content"].startswith("ssa says:")
    event = event_for(response.json()["id"])
    assert event.expert == "ssa"
    assert event.failover_from == [{"slug": "dmv", "reason": "generator_error"}]
    assert event.fallback_used


def test_a_healthy_request_uses_no_fallback_and_fuses_the_top_two_for_auto(serving, client):
    response = chat(client, "how do I renew my licence")
    meta = response.json()["switchboard"]
    assert meta["expert"] == "dmv"
    assert meta["fallback_used"] is False
    assert meta["failover_from"] == []
    assert serving["store"].calls == [["dmv", "ssa"]]


def test_a_timeout_is_reported_with_its_kind(serving):
    serving["generator"].fail["dmv"] = GenerationTimeout
    result = serving_chat.answer("how do I renew my licence", model="auto:fast")
    assert result.expert == "ssa"
    assert result.failover_from == [{"slug": "dmv", "reason": "generator_timeout"}]


def test_the_vector_store_down_for_one_expert_fails_over_to_the_next(serving):
    serving["store"].down = {"dmv"}
    result = serving_chat.answer("how do I renew my licence", model="auto:fast")
    assert result.expert == "ssa"
    assert result.failover_from == [{"slug": "dmv", "reason": "store_unavailable"}]


def test_the_breaker_opens_after_repeated_failures_and_the_expert_is_then_skipped(serving, settings):
    settings.BREAKER_FAILURES = 2
    gen = serving["generator"]
    gen.fail["dmv"] = GenerationError
    for _ in range(2):
        assert serving_chat.answer("how do I renew my licence", model="auto:fast").expert == "ssa"
    from experts.breaker import breaker_for

    assert breaker_for("dmv").state == "open"
    gen.calls.clear()
    result = serving_chat.answer("how do I renew my licence", model="auto:fast")
    assert result.expert == "ssa"
    assert result.failover_from == [{"slug": "dmv", "reason": "circuit_open"}]
    assert "dmv" not in gen.calls  # an open breaker costs the down expert nothing


def test_a_success_keeps_the_breaker_closed(serving, settings):
    settings.BREAKER_FAILURES = 2
    gen = serving["generator"]
    gen.fail["dmv"] = GenerationError
    serving_chat.answer("how do I renew my licence", model="auto:fast")
    del gen.fail["dmv"]
    serving_chat.answer("how do I renew my licence", model="auto:fast")
    gen.fail["dmv"] = GenerationError
    serving_chat.answer("how do I renew my licence", model="auto:fast")
    from experts.breaker import breaker_for

    assert breaker_for("dmv").state == "closed"  # two failures, but not consecutive


def test_when_every_expert_is_down_the_answer_is_503_naming_each_reason_and_still_recorded(serving, client):
    serving["store"].down = {"dmv", "ssa", "va"}
    response = chat(client, "how do I renew my licence")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["type"] == "service_unavailable"
    assert error["code"] == "no_expert_available"
    assert [f["slug"] for f in error["details"]["failover_from"]] == ["dmv", "ssa", "va"]
    assert {f["reason"] for f in error["details"]["failover_from"]} == {"store_unavailable"}
    events.flush()
    event = RoutingEvent.objects.get()
    assert event.status_code == 503
    assert event.error_kind == "no_expert_available"
    assert len(event.failover_from) == 3


def test_a_direct_request_does_not_fail_over_to_other_experts(serving, client):
    serving["generator"].fail["va"] = GenerationError
    response = chat(client, "how do I renew my licence", model="va")
    assert response.status_code == 503
    assert response.json()["error"]["details"]["failover_from"] == [{"slug": "va", "reason": "generator_error"}]
    assert serving["generator"].calls == ["va"]


def test_accurate_mode_merges_both_experts_answers_with_renumbered_citations(serving, client):
    response = chat(client, "licence and pension", model="auto:accurate")
    assert response.status_code == 200, response.content
    body = response.json()
    text = body["choices"][0]["message"]["content"]
    assert text == "DMV (dmv): dmv says: The dmv office handles this. [1]\n\nSSA (ssa): ssa says: The ssa office handles this. [2]"
    meta = body["switchboard"]
    assert [c["expert"] for c in meta["citations"]] == ["dmv", "ssa"]
    assert [c["index"] for c in meta["citations"]] == [1, 2]
    assert [p["expert"] for p in meta["parts"]] == ["dmv", "ssa"]
    assert serving["store"].calls == [["dmv"], ["ssa"]]  # each expert answers from its own passages


def test_accurate_mode_takes_the_next_expert_when_one_of_the_top_two_fails(serving):
    serving["generator"].fail["ssa"] = GenerationError
    result = serving_chat.answer("licence and pension", model="auto:accurate")
    assert [p["expert"] for p in result.parts] == ["dmv", "va"]
    assert result.failover_from == [{"slug": "ssa", "reason": "generator_error"}]


def test_merge_keeps_markers_beyond_a_parts_citations_untouched():
    a = Answer(text="A [1] [2]", citations=[object(), object()])
    b = Answer(text="B [1] and [7]", citations=[object()])
    merged = accurate.merge_answers([("a", "Alpha", a, "[{index}]"), ("b", "Beta", b, "[{index}]")])
    assert merged.text == "Alpha (a): A [1] [2]\n\nBeta (b): B [3] and [7]"
    assert len(merged.citations) == 3


def test_an_experiment_arm_routes_with_its_router_version_and_is_reported(serving, client, monkeypatch, tmp_path):
    # v2 is v1's network with its outputs relabelled: "licence" goes to ssa under v2.
    RouterVersion.objects.create(version=2, path=str(tmp_path / "v1"), experts=["ssa", "dmv", "va"], embedding_model="fake",
                                 data_fingerprint="t2", metrics={"abstain_threshold": 0.5}, is_active=False)
    subjects = []
    monkeypatch.setattr(serving_chat, "assign", lambda subject: subjects.append(subject) or ArmAssignment(experiment_id=7, arm="treatment", router_version=2))
    response = chat(client, "how do I renew my licence", model="auto:fast", user="alice")
    meta = response.json()["switchboard"]
    assert meta["expert"] == "ssa"
    assert meta["router_version"] == 2
    assert meta["arm"] == "treatment"
    assert subjects == ["user:alice"]
    event = event_for(response.json()["id"])
    assert (event.experiment_id, event.arm, event.router_version) == (7, "treatment", 2)


def test_an_arm_pins_the_expert_version_that_answers(serving, monkeypatch):
    from experts.models import ExpertVersion

    dmv = Expert.objects.get(slug="dmv")
    ExpertVersion.objects.create(expert=dmv, version=1, status="active", system_prompt="v1 prompt")
    ExpertVersion.objects.create(expert=dmv, version=2, status="candidate", system_prompt="v2 prompt", adapter_path="/adapters/dmv-v2",
                                 base_model="tiny")
    monkeypatch.setattr(serving_chat, "assign", lambda subject: ArmAssignment(experiment_id=3, arm="treatment", expert_versions={"dmv": 2}))
    result = serving_chat.answer("how do I renew my licence", model="auto:fast")
    request = serving["generator"].requests[-1]
    assert request.system_prompt == "v2 prompt"
    assert request.adapter.name == "dmv-v2"
    assert result.expert_version == 2
    monkeypatch.setattr(serving_chat, "assign", lambda subject: None)
    serving_chat.answer("how do I renew my licence", model="auto:fast")
    assert serving["generator"].requests[-1].system_prompt == "v1 prompt"
    assert serving["generator"].requests[-1].adapter is None


def test_a_key_scoped_to_some_experts_is_routed_among_them_only(serving, client):
    from tests.factories import make_key

    auth = {"HTTP_AUTHORIZATION": f"Bearer {make_key('ssa and va', scopes=['ssa', 'va']).secret}"}
    ask = {"content_type": "application/json", **auth}
    body = {"messages": [{"role": "user", "content": "how do I renew my licence"}]}
    response = client.post("/v1/chat/completions", data=json.dumps({**body, "model": "auto:fast"}), **ask)
    assert response.json()["switchboard"]["expert"] in {"ssa", "va"}
    assert {e["slug"] for e in response.json()["switchboard"]["experts"]} <= {"ssa", "va"}
    denied = client.post("/v1/chat/completions", data=json.dumps({**body, "model": "dmv"}), **ask)
    assert denied.status_code == 403
    assert denied.json()["error"]["code"] == "permission_denied"
    assert "dmv" not in [m["id"] for m in client.get("/v1/models", **auth).json()["data"]]
