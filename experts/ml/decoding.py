"""Decoding rules of the answer itself (pure torch + transformers, no Django).

A small model decoding greedily can loop ("The letter or order is a mistake. The letter or order is
a mistake. ..."). The usual cures (``repetition_penalty``, ``no_repeat_ngram_size``) look at the
whole sequence, prompt included, so they also forbid copying the passages' own words, which is
what a grounded answer should do. ``AnswerNoRepeatNGram`` forbids only an n-gram the *answer* has
already written.
"""

from __future__ import annotations

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
