"""Answers the adapter chooses rather than writes: each passage sentence scored as the answer. Pure: no Django.

A small model fine-tuned on gold answers learns *which* part of the reference material answers a
question better than it learns to write that part out: decoding freely, it drifts, repeats and
paraphrases within a few tokens. ``select`` decoding keeps the adapter's judgement and drops its
drift: every candidate (a sentence of a shown passage, or a run of ``MAX_SPAN`` neighbours, followed by the
passage's marker and the end token, exactly as training targets are written) is scored by the
adapter's mean log-probability per token, and the likeliest is the answer. The prompt is run once;
its key/value cache is shared by every candidate.

The answer is then a verbatim copy of the documents, cited to the passage it came from: it cannot
state what the passages do not say. ``NOT_FOUND`` is one more candidate, so the adapter can still
abstain.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .extractive import NOT_FOUND, Passage, split_sentences
from .lora import Example, fit_prompt, fitted_passages
from .prompting import DEFAULT_CITATION_FORMAT, clean_passage_text, render_citation

# How many neighbouring sentences one candidate may hold. On doc2dial 68% of gold answers are one
# sentence of ``split_sentences``, 25% two, 7% more; yet on its validation split (the first 51 of
# ``evaluate answers --split val``'s questions) pairs as candidates gave routed F1 0.303-0.310 against
# 0.319-0.323 with single sentences alone, at twice the cost (settings.GENERATION_DECODING).
MAX_SPAN = 1
# Padded candidate positions per forward pass: candidates of similar length go together, so little
# of a pass is padding (a pass's cost grows with its rows x the longest candidate).
BATCH_TOKENS = 512


@dataclass(frozen=True)
class Candidate:
    """One answer the adapter may choose: ``text`` from passage ``passage`` (1-based), or the abstention (``passage`` 0)."""

    text: str
    passage: int

    def target(self, citation_format: str = DEFAULT_CITATION_FORMAT) -> str:
        """As a training target is written: the text, then its passage's marker."""
        return self.text if not self.passage else f"{self.text} {render_citation(self.passage, citation_format)}"


def candidates(passages: Sequence[Passage], *, max_span: int = MAX_SPAN, abstain: bool = True,
               citation_format: str = DEFAULT_CITATION_FORMAT) -> list[Candidate]:
    """Every run of 1..``max_span`` neighbouring sentences of each passage (as the prompt shows it), and the abstention."""
    out: list[Candidate] = []
    seen: set[tuple[str, int]] = set()
    for number, passage in enumerate(passages, start=1):
        text = clean_passage_text(passage.text, citation_format)
        sentences = split_sentences(text)
        for start in range(len(sentences)):
            for span in range(1, max_span + 1):
                if start + span > len(sentences):
                    break
                joined = " ".join(sentences[start : start + span]).strip()
                if joined and (joined, number) not in seen:
                    seen.add((joined, number))
                    out.append(Candidate(joined, number))
    if abstain:
        out.append(Candidate(NOT_FOUND, 0))
    return out


def score_continuations(model: Any, prompt_ids: Sequence[int], continuations: Sequence[Sequence[int]], *,
                        batch_tokens: int = BATCH_TOKENS, prefix: Any = None) -> list[tuple[float, int]]:
    """Each continuation's summed log-probability after ``prompt_ids`` and its length in tokens.

    The prompt runs once; its key/value cache is copied for each batch of continuations. Batches
    hold continuations of similar length (longest first, up to ``batch_tokens`` padded positions),
    right-padded: a pad after a continuation is never attended to by its own tokens.

    Args:
        prefix: the model's state (a ``DynamicCache``) after the prompt's first tokens, computed
            before; it is extended in place, so pass a copy. None: the whole prompt is run.
    """
    import torch
    from transformers import DynamicCache

    if not continuations:
        return []
    device = next(model.parameters()).device
    past = prefix if prefix is not None else DynamicCache()
    done = past.get_seq_length() if prefix is not None else 0
    if not 0 <= done < len(prompt_ids):
        raise ValueError(f"the prefix holds {done} tokens of a {len(prompt_ids)}-token prompt")
    out: list[tuple[float, int] | None] = [None] * len(continuations)
    order = sorted(range(len(continuations)), key=lambda i: -len(continuations[i]))
    with torch.no_grad():
        head = model(input_ids=torch.tensor([list(prompt_ids[done:])], device=device), cache=past, use_cache=True)
        first = torch.log_softmax(head.logits[0, -1].float(), dim=-1)
        length = len(prompt_ids)
        start = 0
        while start < len(order):
            width = max(1, len(continuations[order[start]]))
            rows = order[start : start + max(1, batch_tokens // width)]
            start += len(rows)
            ids = torch.zeros((len(rows), width), dtype=torch.long, device=device)
            mask = torch.zeros((len(rows), length + width), dtype=torch.long, device=device)
            mask[:, :length] = 1
            for r, i in enumerate(rows):
                ids[r, : len(continuations[i])] = torch.tensor(list(continuations[i]), dtype=torch.long)
                mask[r, length : length + len(continuations[i])] = 1
            cache = copy.deepcopy(past)
            cache.batch_repeat_interleave(len(rows))
            positions = torch.arange(length, length + width, device=device).unsqueeze(0).expand(len(rows), -1)
            logits = model(input_ids=ids, attention_mask=mask, cache=cache, position_ids=positions, use_cache=True).logits
            logp = torch.log_softmax(logits.float(), dim=-1)
            for r, i in enumerate(rows):
                c = list(continuations[i])
                total = float(first[c[0]])
                if len(c) > 1:
                    follow = torch.tensor(c[1:], device=device)
                    total += float(logp[r, : len(c) - 1].gather(1, follow.unsqueeze(1)).sum())
                out[i] = (total, len(c))
    return [o for o in out if o is not None]


def candidate_ids(tokenizer: Any, candidate: Candidate, citation_format: str = DEFAULT_CITATION_FORMAT) -> list[int]:
    """The tokens the adapter would write for ``candidate``: its target, then the end token (as training writes it)."""
    ids = tokenizer(candidate.target(citation_format), add_special_tokens=False)["input_ids"]
    return [*ids, tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else ids


def choose(scores: Sequence[tuple[float, int]], length_power: float = 1.0) -> int:
    """The index of the best candidate: summed log-probability over length ** ``length_power`` (1: per token; 0: the sum)."""
    if not scores:
        raise ValueError("no candidates to choose from")
    return max(range(len(scores)), key=lambda i: scores[i][0] / max(1, scores[i][1]) ** length_power)


@dataclass(frozen=True)
class Selected:
    """What ``select`` chose: the answer as the model would have written it (marker included) and what it cost."""

    text: str
    prompt_tokens: int
    answer_tokens: int


def select(model: Any, tokenizer: Any, example: Example, room: int, *, history: Sequence[dict[str, str]] = (),
           max_span: int = MAX_SPAN, length_power: float = 1.0, prefix: Callable[[list[int]], Any] | None = None) -> Selected:
    """The candidate ``model`` (with its active adapter) rates best as the answer to ``example``'s prompt.

    The prompt is built as generation builds it (``lora.fit_prompt`` in ``room`` tokens); the
    candidates come from the passages that prompt holds. ``prefix``, given the prompt's ids, returns
    a copy of the model's state after its first tokens (the serving backend's prompt prefix cache), or None.
    """
    prompt = fit_prompt(tokenizer, example, room, history=history)
    shown = list(example.passages)[: fitted_passages(tokenizer, example, room, history=history)]
    options = candidates(shown, max_span=max_span, citation_format=example.citation_format)
    scores = score_continuations(model, prompt, [candidate_ids(tokenizer, c, example.citation_format) for c in options],
                                 prefix=prefix(prompt) if prefix is not None else None)
    best = choose(scores, length_power)
    return Selected(options[best].target(example.citation_format), len(prompt), scores[best][1])
