"""Batched greedy generation with a tiny LM and two adapters: the same answers as one at a time, the right adapter per item."""

from __future__ import annotations

import pytest

from experts.ml.batch_generation import BatchItem, attach_adapters, generate_batch
from experts.ml.extractive import Passage
from experts.ml.loading import load_base
from experts.ml.lora import LoraParams, train_lora
from experts.ml.lora_examples import Example
from tests.support.lora_data import DMV, FAST, SSA

QUESTIONS = [
    Example("How do I renew my driver license?", "", [Passage("Renew a license online at the DMV.", "Renewals", score=0.8)]),
    Example("Where?", "", []),
    Example("When can I start my pension and how much will it be each month?", "", [Passage("Retirement from 62.", "Pensions", score=0.5)] * 3),
]


@pytest.fixture(scope="module")
def adapters(tiny_lm_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("batch-adapters")
    for slug, data in (("dmv", DMV), ("ssa", SSA)):
        train_lora(str(tiny_lm_dir), data, [], LoraParams(**FAST), root / slug, root / f"work-{slug}", threads=1)
    return {"dmv": str(root / "dmv"), "ssa": str(root / "ssa")}


def _texts(model, tokenizer, items, batch_size):
    return generate_batch(model, tokenizer, items, max_new_tokens=8, prompt_tokens=400, batch_size=batch_size)


def test_lora_batches_of_left_padded_prompts_answer_as_one_at_a_time(tiny_lm_dir):
    tokenizer, base = load_base(str(tiny_lm_dir))
    items = [BatchItem(e) for e in QUESTIONS]

    batched = generate_batch(base, tokenizer, items, max_new_tokens=8, prompt_tokens=400, batch_size=3)

    assert batched == _texts(base, tokenizer, items, batch_size=1)


def test_lora_each_item_is_answered_by_its_own_adapter(tiny_lm_dir, adapters):
    tokenizer, base = load_base(str(tiny_lm_dir))
    model = attach_adapters(base, adapters, str(tiny_lm_dir))
    question = QUESTIONS[0]
    mixed = _texts(model, tokenizer, [BatchItem(question, "ssa"), BatchItem(question, None), BatchItem(question, "dmv")], batch_size=4)

    alone = {name: _texts(model, tokenizer, [BatchItem(question, name)], batch_size=1)[0] for name in ("dmv", "ssa", None)}
    assert mixed == [alone["ssa"], alone[None], alone["dmv"]]
    _, plain = load_base(str(tiny_lm_dir))
    assert alone[None] == _texts(plain, tokenizer, [BatchItem(question)], batch_size=1)[0]  # adapters off is the bare base model


def test_lora_an_adapter_for_another_base_model_is_refused_and_the_bare_model_has_none(tiny_lm_dir, adapters):
    from experts.ml.lora_errors import AdapterMismatch

    tokenizer, base = load_base(str(tiny_lm_dir))
    with pytest.raises(AdapterMismatch):
        attach_adapters(base, adapters, "/models/another-base")
    with pytest.raises(ValueError, match="no adapter is attached"):
        _texts(base, tokenizer, [BatchItem(QUESTIONS[0], "dmv")], batch_size=1)
