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
