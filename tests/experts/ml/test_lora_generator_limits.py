"""The transformers backend's limits on the tiny LM: its queue, its time budget, broken adapters, the prompt prefix cache."""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest

from experts.generation import transformers as backend
from experts.generation.base import AdapterError, AdapterMismatch, AdapterRef, GenerationBusy, GenerationRequest, GenerationTimeout
from experts.generation.transformers import TransformersGenerator
from experts.ml.extractive import NOT_FOUND, Answer, Passage

# The model writes its answers: free decoding, no lead sentence, no shortlist (the product chooses among the scorer's).
WRITES = {"decoding": "free", "lead_sentence": False, "select_shortlist": 0}


PASSAGES = [Passage("Renew your license online at the DMV website.", "Renewals", score=0.8),
            Passage("Inspections are due every 12 months.", "Inspections", score=0.6)]


def _request(adapter=None, **kw) -> GenerationRequest:
    kw.setdefault("passages", PASSAGES)
    return GenerationRequest(question="How do I renew my license?", expert="dmv", adapter=adapter, **kw)


@pytest.fixture(scope="module")
def adapter_dir(tiny_lm_dir, tmp_path_factory):
    """A LoRA adapter with random (non-zero) weights on the tiny LM, made with peft directly: no training."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_lm_dir))
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    folder = tmp_path_factory.mktemp("adapters") / "dmv-v1"
    peft.save_pretrained(str(folder))
    return folder


def _ref(path, name="dmv-v1", base="") -> AdapterRef:
    return AdapterRef(expert="dmv", name=name, path=str(path), base_model=base, version=1)


@pytest.fixture(scope="module")
def gen(tiny_lm_dir):
    return TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, max_tokens=6, stop_at_paragraph=False, queue_max=1)


def test_the_prompt_prefix_cache_changes_nothing_in_the_answer(tiny_lm_dir, monkeypatch, adapter_dir):
    cached = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, max_tokens=8, stop_at_paragraph=False)
    first = cached.generate(_request(system_prompt="You answer for the DMV."))
    assert len(cached._prefixes) == 1
    again = cached.generate(_request(system_prompt="You answer for the DMV."))  # from the cached state
    with_adapter = cached.generate(_request(_ref(adapter_dir), system_prompt="You answer for the DMV."))
    assert len(cached._prefixes) == 2  # one state per adapter: LoRA changes the keys and values
    monkeypatch.setattr(backend, "MIN_PREFIX_TOKENS", 10**6)
    plain = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, max_tokens=8, stop_at_paragraph=False)
    assert first.text == again.text == plain.generate(_request(system_prompt="You answer for the DMV.")).text
    assert with_adapter.text == plain.generate(_request(_ref(adapter_dir), system_prompt="You answer for the DMV.")).text
    assert plain._prefixes == {}


def test_a_full_queue_refuses_generate_and_stream_before_any_work(gen):
    gen.queue.acquire()
    holder = threading.Thread(target=lambda: gen.queue.acquire(timeout_s=5) or gen.queue.release(), daemon=True)
    holder.start()  # one waiter: the queue (max 1 waiting) is full now
    deadline = time.monotonic() + 5
    while gen.queue.waiting < 1:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    try:
        with pytest.raises(GenerationBusy):
            gen.generate(_request())
        with pytest.raises(GenerationBusy):
            next(iter(gen.stream(_request())))
    finally:
        gen.queue.release()
        holder.join(5)
    assert isinstance(gen.generate(_request()), Answer)


def test_a_whole_answer_over_its_time_budget_is_a_timeout(gen, monkeypatch):
    clock = iter([0.0] + [1000.0] * 1000)  # the budget starts at 0; every later reading is far past it
    monkeypatch.setattr(backend.time, "monotonic", lambda: next(clock))
    with pytest.raises(GenerationTimeout, match="budget"):
        gen.generate(_request(timeout_s=30))


def test_a_streamed_answer_over_its_time_budget_ends_where_it_is_and_says_so(gen, monkeypatch):
    readings = iter([0.0, 0.0, 0.0] + [1000.0] * 1000)  # start, queue, streamer timeout; then past the budget
    monkeypatch.setattr(backend.time, "monotonic", lambda: next(readings))
    items = list(gen.stream(_request(timeout_s=30)))
    answer = items[-1]
    assert isinstance(answer, Answer)
    assert answer.finish_reason == "time_budget"
    assert len(items) <= 3  # stopped after its first token
    assert not gen.queue.busy


def test_closing_a_stream_early_stops_the_model_and_frees_the_queue(tiny_lm_dir):
    slow = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, max_tokens=200, stop_at_paragraph=False)
    stream = iter(slow.stream(_request()))
    next(stream)
    stream.close()
    deadline = time.monotonic() + 5
    while slow.queue.busy:
        assert time.monotonic() < deadline, "the model kept generating for a client that left"
        time.sleep(0.01)


def test_weak_passages_get_not_found_without_the_model(tmp_path):
    never = TransformersGenerator.from_settings(base_model=str(tmp_path / "no-model"), **WRITES)  # would raise if the model were loaded
    weak = [Passage("Unrelated.", "x", score=0.05)]
    assert never.generate(_request(passages=weak)) == Answer(text=NOT_FOUND, citations=[], grounded=False)
    assert list(never.stream(_request(passages=[])))[-1].grounded is False


def test_an_adapter_for_another_base_model_is_a_mismatch(gen, adapter_dir):
    with pytest.raises(AdapterMismatch, match="trained on"):
        gen.generate(_request(_ref(adapter_dir, name="other-v1", base="/models/llama-3-8b")))


@pytest.mark.parametrize("damage", ["truncated_weights", "garbage_config", "no_weights"])
def test_a_corrupt_adapter_folder_is_refused_and_the_base_model_still_answers(tiny_lm_dir, adapter_dir, tmp_path, damage):
    broken = tmp_path / "dmv-v2"
    shutil.copytree(adapter_dir, broken)
    weights = broken / "adapter_model.safetensors"
    if damage == "truncated_weights":
        weights.write_bytes(weights.read_bytes()[: len(weights.read_bytes()) // 2])
    elif damage == "garbage_config":
        (broken / "adapter_config.json").write_text("{not json")
    else:
        weights.unlink()
    fresh = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, max_tokens=6, stop_at_paragraph=False)
    before = fresh.generate(_request()).text
    with pytest.raises(AdapterError):
        fresh.generate(_request(_ref(broken, name="dmv-v2")))
    shutil.rmtree(broken)
    with pytest.raises(AdapterError):  # remembered as broken: refused again without reading the folder
        fresh.generate(_request(_ref(broken, name="dmv-v2")))
    assert fresh.generate(_request()).text == before  # the base model is untouched
    assert fresh.loaded_adapters == []


def test_adapter_weights_that_do_not_fit_the_model_leave_a_clean_base(tiny_lm_dir, adapter_dir, tmp_path):
    wrong = tmp_path / "dmv-v3"
    shutil.copytree(adapter_dir, wrong)
    config = json.loads((wrong / "adapter_config.json").read_text())
    config["r"] = 16  # the saved matrices have rank 4: loading them fails halfway
    (wrong / "adapter_config.json").write_text(json.dumps(config))
    fresh = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, max_tokens=6, stop_at_paragraph=False)
    before = fresh.generate(_request()).text
    with pytest.raises(AdapterError, match="could not be loaded"):
        fresh.generate(_request(_ref(wrong, name="dmv-v3")))
    assert fresh.generate(_request()).text == before
    assert fresh.generate(_request(_ref(adapter_dir))).text  # a good adapter still loads afterwards


def test_the_stream_gives_the_words_as_the_model_writes_them_with_markers_already_renumbered(tiny_lm_dir, monkeypatch):
    gen = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), **WRITES, max_tokens=12, stop_at_paragraph=False)
    from transformers import TextIteratorStreamer

    puts: list[int] = []
    original = TextIteratorStreamer.put
    monkeypatch.setattr(TextIteratorStreamer, "put", lambda self, value: puts.append(1) or original(self, value))
    items = list(gen.stream(_request()))
    deltas, answer = items[:-1], items[-1]
    tokens = len(puts) - 1  # the prompt is one put, then one per generated token
    assert tokens >= 4
    assert len(deltas) >= tokens // 2  # not one lump at the end: a delta every token or two
    assert "".join(deltas).strip() == answer.text
