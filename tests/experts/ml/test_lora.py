"""LoRA training on a tiny random-weight LM: adapters differ, reload, resume after an interruption, bad input."""

from __future__ import annotations

import json

import pytest
import torch

from experts.ml.extractive import Passage
from experts.ml.loading import check_adapter, load_base
from experts.ml.lora import LoraParams, last_checkpoint_step, train_lora
from experts.ml.lora_errors import AdapterMismatch, BaseModelNotFound, LoraError, TrainingOutOfMemory
from experts.ml.lora_examples import Example
from tests.support.lora_data import DMV, FAST, SSA


def _logits(model, tokenizer, text: str) -> torch.Tensor:
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        return model(**ids).logits[0, -1]


def test_lora_adapters_trained_on_different_data_differ_after_reload(tiny_lm_dir, tmp_path):
    from peft import PeftModel

    params = LoraParams(**FAST)
    a = train_lora(str(tiny_lm_dir), DMV, DMV[:1], params, tmp_path / "dmv", tmp_path / "work-dmv")
    b = train_lora(str(tiny_lm_dir), SSA, SSA[:1], params, tmp_path / "ssa", tmp_path / "work-ssa")
    assert a.steps == b.steps == 4
    assert len(a.loss_curve) == 4
    assert a.eval_loss is not None
    assert a.eval_perplexity == pytest.approx(torch.tensor(a.eval_loss).exp().item(), rel=1e-5)
    assert a.eval_loss < a.base_eval_loss  # evaluated on an example it trained on: the adapter learned it
    assert (tmp_path / "dmv" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "work-dmv").exists()  # checkpoints are removed after success

    tokenizer, base = load_base(str(tiny_lm_dir))
    prompt = "<s><|user|>\nHow do I renew my driver license?</s>\n<|assistant|>\n"
    plain = _logits(base, tokenizer, prompt)
    model = PeftModel.from_pretrained(base, str(tmp_path / "dmv"), adapter_name="dmv")
    model.load_adapter(str(tmp_path / "ssa"), adapter_name="ssa")
    model.eval()
    model.set_adapter("dmv")
    with_dmv = _logits(model, tokenizer, prompt)
    model.set_adapter("ssa")
    with_ssa = _logits(model, tokenizer, prompt)
    model.set_adapter("dmv")
    assert torch.allclose(_logits(model, tokenizer, prompt), with_dmv)  # switching back gives the same model
    assert (with_dmv - with_ssa).abs().max() > 1e-3
    assert (with_dmv - plain).abs().max() > 1e-3


def test_lora_training_resumes_from_the_last_checkpoint_after_an_interruption(tiny_lm_dir, tmp_path):
    params = LoraParams(**{**FAST, "max_steps": 6, "checkpoint_steps": 2})
    seen: list[int] = []

    def crash_after_step_4(step, total, loss):
        seen.append(step)
        if step == 4:
            raise KeyboardInterrupt("worker restarted")

    with pytest.raises(KeyboardInterrupt):
        train_lora(str(tiny_lm_dir), DMV, [], params, tmp_path / "out", tmp_path / "work", on_step=crash_after_step_4)
    assert seen == [1, 2, 3, 4]
    assert last_checkpoint_step(tmp_path / "work") == 4
    assert not (tmp_path / "out").exists()  # nothing half-written

    resumed: list[int] = []
    result = train_lora(str(tiny_lm_dir), DMV, [], params, tmp_path / "out", tmp_path / "work", on_step=lambda s, t, loss: resumed.append(s))
    assert result.resumed_from == 4
    assert resumed == [5, 6]
    assert [p["step"] for p in result.loss_curve] == [1, 2, 3, 4, 5, 6]

    straight = train_lora(str(tiny_lm_dir), DMV, [], params, tmp_path / "straight", tmp_path / "work2")
    # The resumed run saw the same batches with the same optimiser state: same losses as an uninterrupted run.
    assert [p["loss"] for p in result.loss_curve] == pytest.approx([p["loss"] for p in straight.loss_curve], abs=1e-3)


def test_lora_refuses_a_base_model_that_does_not_exist(tmp_path):
    with pytest.raises(BaseModelNotFound, match="does not exist"):
        train_lora(str(tmp_path / "nope"), DMV, [], LoraParams(**FAST), tmp_path / "o", tmp_path / "w")
    with pytest.raises(BaseModelNotFound, match="never downloads"):
        load_base("some-org/some-model-not-cached")


def test_lora_refuses_empty_answers_and_too_few_examples(tiny_lm_dir, tmp_path):
    bad = [*DMV[:3], Example("What now?", "   ")]
    with pytest.raises(LoraError, match="empty question or answer"):
        train_lora(str(tiny_lm_dir), bad, [], LoraParams(**FAST), tmp_path / "o", tmp_path / "w")
    with pytest.raises(LoraError, match="at least 10"):
        train_lora(str(tiny_lm_dir), DMV, [], LoraParams(**FAST), tmp_path / "o", tmp_path / "w", min_examples=10)
    with pytest.raises(LoraError, match="rank"):
        LoraParams.from_dict({"rank": 0})
    with pytest.raises(LoraError, match="do not exist"):
        train_lora(str(tiny_lm_dir), DMV, [], LoraParams(**{**FAST, "target_modules": ["nonexistent_proj"]}), tmp_path / "o", tmp_path / "w")


def test_lora_adapter_for_another_base_model_is_refused(tiny_lm_dir, tmp_path):
    train_lora(str(tiny_lm_dir), DMV, [], LoraParams(**{**FAST, "max_steps": 1}), tmp_path / "a", tmp_path / "w")
    check_adapter(tmp_path / "a", str(tiny_lm_dir))  # the right base passes
    with pytest.raises(AdapterMismatch, match="trained on"):
        check_adapter(tmp_path / "a", "/models/another-base")
    meta = json.loads((tmp_path / "a" / "switchboard.json").read_text())
    assert meta["params"]["rank"] == 4


def test_lora_out_of_memory_becomes_a_clear_error(tiny_lm_dir, tmp_path):
    def oom(step, total, loss):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(TrainingOutOfMemory, match="lower batch_size"):
        train_lora(str(tiny_lm_dir), DMV, [], LoraParams(**FAST), tmp_path / "o", tmp_path / "w", on_step=oom)
    assert not (tmp_path / "o").exists()


def test_lora_long_prompts_lose_their_last_passages_before_anything_else(tiny_lm_dir):
    from experts.ml.lora_examples import fit_prompt

    tokenizer, _ = load_base(str(tiny_lm_dir))
    passages = [Passage("Licence renewal rules. " * 40, f"Doc {i}", score=0.9 - i / 10) for i in range(5)]
    example = Example("How do I renew?", "Online.", passages)
    full = fit_prompt(tokenizer, example, 100000)
    short = fit_prompt(tokenizer, example, len(full) // 2)
    text = tokenizer.decode(short)
    assert len(short) <= len(full) // 2
    assert text.startswith("<s><|system|>")  # the rules survive
    assert "Question: How do I renew?" in text
    assert "Doc 0" in text
    assert "Doc 4" not in text


def test_lora_the_answer_only_loss_is_the_models_own_loss(tiny_lm_dir):
    from experts.ml.lora import answer_loss
    from experts.ml.lora_examples import collate, encode_example

    tokenizer, model = load_base(str(tiny_lm_dir))
    batch = collate([encode_example(tokenizer, e, 256) for e in DMV[:3]], tokenizer.pad_token_id)
    with torch.no_grad():
        summed, tokens = answer_loss(model, batch)
        reference = model(**batch).loss
    assert tokens == int((batch["labels"][:, 1:] != -100).sum())
    assert float(summed) / tokens == pytest.approx(float(reference), rel=1e-4)


def test_lora_top_layers_adapts_only_the_last_layers(tiny_lm_dir, tmp_path):
    from safetensors.torch import load_file

    train_lora(str(tiny_lm_dir), DMV, [], LoraParams(**{**FAST, "max_steps": 1, "top_layers": 1}), tmp_path / "top", tmp_path / "w")
    keys = load_file(str(tmp_path / "top" / "adapter_model.safetensors"))
    assert keys
    assert all(".layers.1." in k for k in keys)
    with pytest.raises(LoraError, match="top_layers"):
        LoraParams.from_dict({"top_layers": -1})
