"""The transformers backend with two tiny LoRA adapters: switched per request, LRU, streaming, bad input."""

from __future__ import annotations

import pytest
import torch

from experts.generation.base import AdapterRef, GenerationError, GenerationRequest, GenerationUnavailable
from experts.generation.transformers import TransformersGenerator
from experts.ml.extractive import Answer, Passage
from experts.ml.lora import LoraParams, train_lora
from tests.support.lora_data import DMV, FAST, SSA

# The model writes its answers: free decoding, no lead sentence, no shortlist (the product chooses among the scorer's).
WRITES = {"decoding": "free", "lead_sentence": False, "select_shortlist": 0}


@pytest.fixture(scope="module")
def adapters(tiny_lm_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    params = LoraParams(**FAST)
    refs = {}
    for slug, data in (("dmv", DMV), ("ssa", SSA)):
        train_lora(str(tiny_lm_dir), data, [], params, root / slug, root / f"work-{slug}", threads=1)
        refs[slug] = AdapterRef(expert=slug, name=f"{slug}-v1", path=str(root / slug), base_model=str(tiny_lm_dir), version=1)
    return refs


def _request(adapter=None, **kw) -> GenerationRequest:
    passages = [Passage("Renew your license online at the DMV website.", "Renewals", score=0.8)]
    return GenerationRequest(question="How do I renew my license?", expert="dmv", passages=passages, adapter=adapter, **kw)


def test_lora_generator_switches_adapter_per_request(tiny_lm_dir, adapters):
    gen = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, cache_size=4, max_tokens=8)
    base = gen.next_token_logits(_request())
    dmv = gen.next_token_logits(_request(adapters["dmv"]))
    ssa = gen.next_token_logits(_request(adapters["ssa"]))
    assert (dmv - ssa).abs().max() > 1e-3
    assert (dmv - base).abs().max() > 1e-3
    # Back to each one, and to the bare base model with adapters loaded: the same figures again.
    assert torch.allclose(gen.next_token_logits(_request(adapters["dmv"])), dmv, atol=1e-5)
    assert torch.allclose(gen.next_token_logits(_request()), base, atol=1e-5)
    assert gen.loaded_adapters == ["ssa-v1", "dmv-v1"]
    answer = gen.generate(_request(adapters["ssa"]))
    assert isinstance(answer, Answer)
    assert answer.text


def test_lora_generator_evicts_the_least_recently_used_adapter(tiny_lm_dir, adapters):
    gen = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, cache_size=1, max_tokens=4)
    first = gen.next_token_logits(_request(adapters["dmv"]))
    gen.next_token_logits(_request(adapters["ssa"]))
    assert gen.loaded_adapters == ["ssa-v1"]
    assert set(gen._peft.peft_config) == {"ssa-v1"}  # really deleted from the model, not only forgotten
    again = gen.next_token_logits(_request(adapters["dmv"]))
    assert gen.loaded_adapters == ["dmv-v1"]
    assert torch.allclose(first, again, atol=1e-5)  # reloaded from its folder: the same adapter


def test_lora_generator_streams_deltas_then_the_answer(tiny_lm_dir, adapters):
    gen = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, max_tokens=6)
    items = list(gen.stream(_request(adapters["dmv"])))
    assert isinstance(items[-1], Answer)
    assert all(isinstance(i, str) for i in items[:-1])
    assert items[-1].text == gen.generate(_request(adapters["dmv"])).text  # greedy: stream and generate agree


def test_lora_generator_warm_up_loads_the_hottest_adapters_first(tiny_lm_dir, adapters):
    gen = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, cache_size=1)
    assert gen.warm_up([adapters["ssa"], adapters["dmv"]]) == ["ssa-v1"]


def test_lora_generator_missing_base_model_is_unavailable(tmp_path):
    gen = TransformersGenerator.from_settings(base_model=str(tmp_path / "missing-model"), **WRITES)
    with pytest.raises(GenerationUnavailable, match="does not exist"):
        gen.generate(_request())


def test_lora_generator_refuses_an_adapter_for_another_base_model(tiny_lm_dir, adapters, tmp_path):
    gen = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES)
    foreign = AdapterRef(expert="dmv", name="dmv-v9", path=adapters["dmv"].path, base_model="/models/llama-3-8b", version=9)
    with pytest.raises(GenerationError, match="trained on"):
        gen.generate(_request(foreign))
    # The same adapter folder declared against our base, but served by a generator on another base.
    other = TransformersGenerator.from_settings(base_model=str(tmp_path), **WRITES)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(GenerationError):
        other.generate(_request(adapters["dmv"]))


def test_lora_generator_weights_dtype_follows_the_setting(tiny_lm_dir, adapters, monkeypatch):
    gen = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, max_tokens=4, dtype="bfloat16")
    assert gen.generate(_request(adapters["dmv"])).text  # a float32 adapter on bfloat16 weights answers
    assert gen._base.dtype == torch.bfloat16
    assert TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, dtype="float32").torch_dtype() == torch.float32
    monkeypatch.setattr("experts.generation.transformers.bf16_native", lambda: False)
    assert TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES).torch_dtype() == torch.float32  # auto: float32 where bfloat16 is not native
    with pytest.raises(ValueError, match="GENERATION_DTYPE"):
        TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, dtype="float16")
