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


def _spans_of(written: list[int], prompt: list[int]) -> bool:
    """Whether ``written`` splits into runs each found contiguously in ``prompt`` (greedy longest runs)."""
    i = 0
    while i < len(written):
        best = 0
        for p in range(len(prompt)):
            n = 0
            while i + n < len(written) and p + n < len(prompt) and prompt[p + n] == written[i + n]:
                n += 1
            best = max(best, n)
        if best == 0:
            return False
        i += best
    return True


def test_span_copy_allows_only_continuations_except_after_a_sentence_end_or_its_sources_end():
    from experts.ml.decoding import span_copy

    class Tok:  # ids 1-6 are words, 7 is ".", 9 is a word not in the prompt
        unk_token_id = None

        def decode(self, ids):
            return {7: "."}.get(ids[0], f" w{ids[0]}")

        def convert_ids_to_tokens(self, i):
            return f"w{i}"

        def convert_tokens_to_ids(self, t):
            return None

    prompt = [1, 2, 3, 7, 4, 5, 2, 6]
    processor = span_copy([prompt], start=8, tokenizer=Tok(), always=[0])

    def allowed(answer):
        ids = torch.tensor([prompt + answer])
        scores = processor(ids, torch.zeros((1, 10)))
        return set(torch.isfinite(scores[0]).nonzero().flatten().tolist())

    assert allowed([]) == {0, 1, 2, 3, 4, 5, 6, 7}  # the start: anywhere in the prompt
    assert allowed([2]) == {3, 6}  # "2" is followed by 3 and by 6 in the prompt; no stopping inside a span
    assert allowed([2, 6]) == {0}  # the prompt ends after "2 6": only the end (or a marker) is left
    processor = span_copy([prompt], start=8, tokenizer=Tok(), always=[0])
    allowed([])
    allowed([1])
    assert allowed([1, 2]) == {3}
    assert allowed([1, 2, 3]) == {7}
    assert allowed([1, 2, 3, 7]) == {0, 1, 2, 3, 4, 5, 6, 7}  # after a sentence's end it may jump


def test_with_span_copy_a_model_writes_spans_of_its_prompt(tiny_lm_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from experts.ml.batch_generation import BatchItem, fit_prompt, generate_batch
    from experts.ml.extractive import Passage
    from experts.ml.lora import Example

    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_lm_dir)
    items = [BatchItem(Example(q, "", [Passage(text=t, title="Fees", score=0.9)]), None)
             for q, t in (("how much is the fee", "The renewal fee is 64 dollars. Pay it online or by mail."),
                          ("when does it open", "The office opens at nine on weekdays."))]
    plain = generate_batch(model, tokenizer, items, max_new_tokens=16, prompt_tokens=200)
    copied = generate_batch(model, tokenizer, items, max_new_tokens=16, prompt_tokens=200, copy_spans=True)
    assert [g.text for g in plain] != [g.text for g in copied]
    for item, g in zip(items, copied, strict=True):
        prompt = fit_prompt(tokenizer, item.example, 200)
        written = tokenizer(g.text, add_special_tokens=False)["input_ids"]
        assert g.new_tokens > 0
        assert _spans_of(written, prompt), g.text
