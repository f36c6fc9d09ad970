"""The answer may not repeat its own n-grams, and copying the prompt's stays free."""

from __future__ import annotations

import torch

from experts.ml.decoding import answer_no_repeat


def test_an_ngram_the_answer_already_wrote_is_banned_and_the_prompts_are_not():
    prompt = [5, 6, 7, 8]  # the passages: 6 7 8 may be copied freely
    answer = [6, 7, 8, 9, 6, 7]  # wrote "6 7 8" once; now at "6 7", so 8 would repeat "6 7 8"
    ids = torch.tensor([[*prompt, *answer]])
    scores = torch.zeros(1, 12)
    out = answer_no_repeat(len(prompt), 3)(ids, scores.clone())
    assert out[0, 8] == float("-inf")
    assert torch.isfinite(out[0, [i for i in range(12) if i != 8]]).all()
    fresh = torch.tensor([[*prompt, 6, 7]])  # "5 6 7 8" is in the prompt, not the answer: 8 stays allowed
    assert torch.isfinite(answer_no_repeat(len(prompt), 3)(fresh, torch.zeros(1, 12))).all()
    assert answer_no_repeat(4, 0) is None


def test_a_looping_model_stops_looping(tiny_lm_dir):
    from transformers import AutoModelForCausalLM, LogitsProcessorList

    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir)
    prompt = torch.tensor([[1, 20, 21, 22]])
    plain = model.generate(prompt, max_new_tokens=40, do_sample=False, pad_token_id=0)[0, 4:].tolist()
    guarded = model.generate(prompt, max_new_tokens=40, do_sample=False, pad_token_id=0,
                             logits_processor=LogitsProcessorList([answer_no_repeat(4, 3)]))[0, 4:].tolist()
    trigrams = [tuple(guarded[i : i + 3]) for i in range(len(guarded) - 2)]
    assert len(trigrams) == len(set(trigrams))  # no trigram twice in the answer
    plain_trigrams = [tuple(plain[i : i + 3]) for i in range(len(plain) - 2)]
    assert len(plain_trigrams) > len(set(plain_trigrams))  # a random tiny model does loop without it


def test_the_copy_bias_raises_each_rows_own_prompt_tokens_and_the_end_token_only():
    from experts.ml.decoding import copy_bias

    assert copy_bias([[1, 2]], 0.0) is None
    processor = copy_bias([[5, 6, 6], [7]], 2.0, always=[0, None])
    scores = processor(torch.zeros((2, 4), dtype=torch.long), torch.zeros((2, 10)))
    assert scores[0].nonzero().flatten().tolist() == [0, 5, 6]
    assert scores[1].nonzero().flatten().tolist() == [0, 7]
    assert float(scores[0, 5]) == 2.0


def test_with_a_large_copy_bias_a_model_writes_only_its_prompts_tokens(tiny_lm_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from experts.ml.batch_generation import BatchItem, fit_prompt, generate_batch
    from experts.ml.extractive import Passage
    from experts.ml.lora import Example

    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_lm_dir)
    item = BatchItem(Example("how much is the fee", "", [Passage(text="The renewal fee is 64 dollars.", title="Fees", score=0.9)]), None)
    plain, copying = (generate_batch(model, tokenizer, [item], max_new_tokens=12, prompt_tokens=200, copy_bias=b)[0] for b in (0.0, 1e4))
    prompt = set(fit_prompt(tokenizer, item.example, 200)) | {tokenizer.eos_token_id}
    written = tokenizer(copying.text, add_special_tokens=False)["input_ids"]
    assert set(written) <= prompt
    assert plain.text != copying.text
