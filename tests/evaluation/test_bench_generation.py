"""``bench generation`` on the tiny random LM: the figures it reports are there and add up (the real run is `manage.py bench generation`)."""

from __future__ import annotations

import pytest

from evaluation import bench_generation
from experts.generation.base import GenerationRequest
from experts.generation.transformers import TransformersGenerator
from experts.ml.extractive import Passage

# The model writes its answers: free decoding, no lead sentence, no shortlist (the product chooses among the scorer's).
WRITES = {"decoding": "free", "lead_sentence": False, "select_shortlist": 0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from experts.ml.tiny_lm import build_tiny_lm

    texts = ["Renew your license online at the DMV website.", "Inspections are due every 12 months at a licensed station."] * 20
    folder = build_tiny_lm(tmp_path_factory.mktemp("tiny-lm"), texts, vocab_size=300, hidden_size=32, layers=1, heads=2)
    return TransformersGenerator.from_settings(base_model=str(folder), **WRITES, max_tokens=5, stop_at_paragraph=False, threads=1)


def requests(n: int) -> list[GenerationRequest]:
    passages = [Passage("Renew your license online at the DMV website.", "Renewals", score=0.8)]
    return [GenerationRequest(question=f"How do I renew my license? ({i})", expert="dmv", passages=passages) for i in range(n)]


def test_a_level_reports_first_token_speed_and_length_for_every_request(tiny):
    report = bench_generation._level(tiny, requests(4), concurrency=2, say=lambda _: None)
    assert (report["concurrency"], report["requests"], report["answered"], report["errors"]) == (2, 4, 4, [])
    assert report["first_token_p50_ms"] > 0
    assert report["first_token_p90_ms"] >= report["first_token_p50_ms"]
    assert 0 < report["answer_tokens_mean"] <= report["answer_tokens_max"]
    assert sum(report["finish_reasons"].values()) == 4


def test_a_chosen_answer_arrives_whole_so_no_decoding_speed_is_claimed(tiny):
    chooser = TransformersGenerator.from_settings(base_model=tiny.base_model, max_tokens=5, stop_at_paragraph=False, threads=1, decoding="select", lead_sentence=False, select_shortlist=0)
    report = bench_generation._level(chooser, requests(2), concurrency=1, say=lambda _: None)
    assert report["answered"] == 2
    assert report["first_token_p50_ms"] > 0
    assert report["tokens_per_s"] is None
    assert bench_generation._level(tiny, requests(2), concurrency=1, say=lambda _: None)["tokens_per_s"] is not None  # written: it has one


def test_the_adapter_switch_is_timed_on_two_adapters_made_with_peft(tiny):
    from experts.ml.lora import LoraParams

    report = bench_generation._adapter_switch(tiny, requests(1)[0], rounds=2, say=lambda _: None, params=LoraParams(target_modules=["q_proj", "v_proj"]))
    assert report["adapters"] == ["bench-v1", "bench-v2"]
    assert report["forward_same_adapter_p50_ms"] > 0
    assert report["forward_switching_p50_ms"] > 0
    assert report["set_adapter_us"] > 0


def test_vllm_is_reported_as_not_measured_without_its_url(monkeypatch):
    monkeypatch.delenv("VLLM_URL", raising=False)
    assert bench_generation._vllm(requests(1), say=lambda _: None) == {"measured": False, "reason": "not measured: VLLM_URL not set"}
