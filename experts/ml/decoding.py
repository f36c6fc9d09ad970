"""Decoding rules of the answer itself (pure torch + transformers, no Django).

A small model decoding greedily can loop ("The letter or order is a mistake. The letter or order is
a mistake. ..."). The usual cures (``repetition_penalty``, ``no_repeat_ngram_size``) look at the
whole sequence, prompt included, so they also forbid copying the passages' own words, which is
what a grounded answer should do. ``AnswerNoRepeatNGram`` forbids only an n-gram the *answer* has
already written.

A grounded answer mostly reuses the passages' words, and gold answers of extractive datasets are
spans of them. ``copy_bias`` adds a constant to the logit of every token of each row's own prompt
(its passages, its question, the markers and layout the prompt uses), so that among near-ties the
model prefers to copy. The end-of-text token is always among them: a bias must not keep an answer
going.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def answer_no_repeat(start: int, n: int) -> Any:
    """A transformers LogitsProcessor banning, after position ``start``, any ``n``-gram the answer already contains (None when ``n`` < 2)."""
    if n < 2:
        return None
    import torch
    from transformers import LogitsProcessor

    class AnswerNoRepeatNGram(LogitsProcessor):
        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            answer = input_ids[:, start:]
            if answer.shape[1] < n:
                return scores
            for row in range(answer.shape[0]):
                tokens = answer[row].tolist()
                prefix = tokens[len(tokens) - (n - 1):]
                banned = {tokens[i + n - 1] for i in range(len(tokens) - n + 1) if tokens[i : i + n - 1] == prefix}
                if banned:
                    scores[row, sorted(banned)] = float("-inf")
            return scores

    return AnswerNoRepeatNGram()


def copy_bias(prompts: Sequence[Sequence[int]], bias: float, always: Iterable[int | None] = ()) -> Any:
    """A transformers LogitsProcessor adding ``bias`` to the tokens of row r's prompt ``prompts[r]`` (None when ``bias`` is 0)."""
    if not bias:
        return None
    import torch
    from transformers import LogitsProcessor

    extra = {int(t) for t in always if t is not None}
    rows = [torch.tensor(sorted(set(map(int, prompt)) | extra), dtype=torch.long) for prompt in prompts]

    class CopyBias(LogitsProcessor):
        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            for row, ids in enumerate(rows):
                scores[row, ids] += bias
            return scores

    return CopyBias()


def processors(*items: Any) -> list[Any]:
    """The logits processors among ``items`` that are on (not None)."""
    return [p for p in items if p is not None]
