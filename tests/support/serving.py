"""The chat API's fakes at its boundaries (not a test module): a keyword encoder, a store and a generator
whose failures each test chooses, a language model, and a hand-built router over three experts.

Every decision is known in advance and nothing needs a model or a vector store. The fixtures are
registered for every test folder by ``tests/conftest.py``.
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
from experts.generation import GenerationError, stream_by_words
from experts.ml.extractive import NOT_FOUND, Answer
from knowledge.stores import Hit, StoreUnavailable
from routing.ml.router import RouterNet
from routing.models import RouterVersion, RoutingEvent
from serving import chat as serving_chat
from serving import events, expert_answer, route
from tests.factories import make_expert

DIM = 8
EXPERTS = ["dmv", "ssa", "va"]
KEYWORDS = {"licence": 0, "pension": 1, "veteran": 2}


class FakeEncoder:
    """Keywords point along their expert's axis; "A and B" leans a little towards A; anything else points nowhere known."""

    name = "fake"
    dimension = DIM

    def __init__(self, keywords: dict[str, int] = KEYWORDS, *, fold_case: bool = False):
        self.keywords = keywords
        self.fold_case = fold_case  # match keywords whatever their case
        self.seen: list[str] = []  # every text encoded, in order

    def encode(self, texts, batch_size=64):
        self.seen.extend(texts)
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            folded = text.lower() if self.fold_case else text
            axes = [axis for word, axis in self.keywords.items() if word in folded]
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
def fake_encoder(monkeypatch):
    """The keyword encoder in place of the sentence encoder, for routing and for chat's conversation turns."""
    fake = FakeEncoder()
    monkeypatch.setattr(route, "get_encoder", lambda *a, **k: fake)
    monkeypatch.setattr(serving_chat, "get_encoder", lambda *a, **k: fake)
    return fake


def install_router(tmp_path, settings, *, embedding_model: str) -> RouterVersion:
    """Save and activate a router over dmv/ssa/va (one prototype per axis, the MLP silent), abstaining below
    similarity 0.5, said to be trained on ``embedding_model``'s vectors."""
    settings.ROUTER_DIR = tmp_path
    settings.ROUTER_LOAD_WINDOW = 10
    settings.ROUTER_LOAD_PENALTY = 0.0
    settings.ROUTER_CAPACITY = 1.0
    for slug in EXPERTS:
        make_expert(slug, slug.upper())
    torch.manual_seed(0)
    model = RouterNet(input_dim=DIM, n_experts=3, use_conv=False, hidden_dim=128, prototypes_per_expert=1, prototype_weight=20.0)
    with torch.no_grad():
        model.gate[-1].weight.zero_()  # the MLP says nothing: the prototypes decide
        model.gate[-1].bias.zero_()
    model.set_prototypes([torch.eye(DIM)[i : i + 1] for i in range(3)])
    model.save(tmp_path / "v1")
    route._router_cache.clear()
    return RouterVersion.objects.create(
        version=1, path=str(tmp_path / "v1"), experts=EXPERTS, embedding_model=embedding_model, data_fingerprint="test",
        metrics={"abstain_threshold": 0.5}, is_active=True,
    )


@pytest.fixture
def router(tmp_path, settings, fake_encoder, db):
    """An active router over dmv/ssa/va (one prototype per axis), abstaining below similarity 0.5; breakers start closed."""
    settings.EVENTS_SYNC = True
    caches[settings.BREAKER_CACHE].clear()
    # Trained, as far as serving can tell, on the vectors the encoder makes now.
    yield install_router(tmp_path, settings, embedding_model=embedding_space())
    route._router_cache.clear()
    caches[settings.BREAKER_CACHE].clear()


@pytest.fixture
def store(monkeypatch):
    fake = FakeStore()
    monkeypatch.setattr(serving_chat.knowledge, "search_experts", fake)
    return fake


def use_generator(monkeypatch, fake):
    """Serve every expert's answers with ``fake`` as the configured backend."""
    monkeypatch.setattr(expert_answer, "get_generator", lambda *a, **k: fake)
    return fake


@pytest.fixture
def generator(monkeypatch):
    """The failover tests' generator as the configured (extractive) backend."""
    return use_generator(monkeypatch, FakeGenerator())


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


class FakeModel:
    """A language model backend: answers "model: <first passage> [1]"; ``fail`` maps an adapter name (or "*") to an exception."""

    name = "fake-llm"

    def __init__(self):
        self.fail: dict[str, Exception] = {}
        self.requests: list = []

    def _check(self, request) -> None:
        self.requests.append(request)
        error = self.fail.get(request.adapter.name if request.adapter else "base") or self.fail.get("*")
        if error is not None:
            raise error

    def generate(self, request) -> Answer:
        self._check(request)
        first = request.passages[0]
        return Answer(text=f"model: {first.text} [1]", citations=[first], grounded=True)

    def stream(self, request) -> Iterator[str | Answer]:
        self._check(request)
        yield from stream_by_words(self.generate(request), words_per_chunk=1)


@pytest.fixture
def fake_model(monkeypatch):
    """The language model backend in place of the configured one."""
    return use_generator(monkeypatch, FakeModel())


@pytest.fixture
def fake_fallback(monkeypatch):
    """The extractive fallback generator, faked as the failover tests' generator."""
    fake = FakeGenerator()
    monkeypatch.setattr(expert_answer, "get_fallback_generator", lambda: fake)
    return fake


@pytest.fixture
def model_serving(router, store, fake_model, fake_fallback, no_experiment):
    """A chat request's boundaries faked with a language model as the backend and the extractive fallback."""
    return {"model": fake_model, "fallback": fake_fallback, "store": store}


def meta_of(response) -> dict:
    assert response.status_code == 200, response.content
    return response.json()["switchboard"]


@pytest.fixture
def labelled(db, settings, tmp_path, monkeypatch):
    """A promoted clustering run whose queries (with cached embeddings) belong to the given experts."""
    from labeling.choices import ProposalStatus, RunStatus
    from labeling.models import Assignment, ClusteringRun, Embedding, Proposal, Query
    from sbcommon.hashing import text_hash

    settings.ROUTER_DIR = tmp_path
    monkeypatch.setattr("labeling.services.get_encoder", lambda *a, **k: FakeEncoder())

    def make(sizes: dict[str, int], dim: int = DIM) -> ClusteringRun:  # the fake encoder's size: training encodes typo copies with it
        rng = np.random.default_rng(0)
        run = ClusteringRun.objects.create(model=settings.EMBEDDING_MODEL, eps=0.2, min_samples=3, n_experts=len(sizes), fingerprint="t", status=RunStatus.PROMOTED)
        for index, (slug, size) in enumerate(sizes.items()):
            expert = make_expert(slug, slug)
            proposal = Proposal.objects.create(run=run, index=index, name=slug, status=ProposalStatus.PROMOTED, expert=expert)
            for j in range(size):
                text = f"{slug} question {j}"
                v = np.zeros(dim, dtype=np.float32)
                v[index] = 1.0
                v += 0.2 * rng.normal(size=dim).astype(np.float32)
                v /= np.linalg.norm(v)
                q = Query.objects.create(text=text, text_hash=text_hash(text), row_hash=text_hash("r" + text), source="t")
                Embedding.objects.create(model=settings.EMBEDDING_MODEL, text_hash=q.text_hash, vector=v.astype("<f4").tobytes())
                Assignment.objects.create(run=run, query=q, topic=index, proposal=proposal)
        return run

    return make
