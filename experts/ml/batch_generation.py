"""Greedy answers for many prompts at once, with one base model and its LoRA adapters. Pure: no Django.

Prompts are built as training builds them (``lora_examples.fit_prompt``), grouped by adapter, sorted
by length and run in left-padded batches; the activation gate answers an expert's held-out questions this way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .loading import check_adapter
from .lora_examples import Example, fit_prompt


@dataclass
class BatchItem:
    """One question to answer: its prompt's parts and the adapter to answer with (None: the bare base model)."""

    example: Example
    adapter: str | None = None


def attach_adapters(base: Any, adapters: dict[str, str | Path], base_model: str) -> Any:
    """``base`` wrapped in one PeftModel holding every adapter of ``adapters`` (name -> folder), for inference.

    Each adapter must have been trained on ``base_model`` (``loading.check_adapter``). Without adapters
    the base model is returned as it is.
    """
    if not adapters:
        return base
    from peft import PeftModel

    model = None
    for name, folder in adapters.items():
        check_adapter(folder, base_model)
        if model is None:
            model = PeftModel.from_pretrained(base, str(folder), adapter_name=name, is_trainable=False)
        else:
            model.load_adapter(str(folder), adapter_name=name, is_trainable=False)
    model.eval()
    return model


def _context(model: Any, adapter: str | None) -> Any:
    from peft import PeftModel

    if not isinstance(model, PeftModel):  # the bare base model
        if adapter is not None:
            raise ValueError(f"adapter {adapter!r} requested but no adapter is attached")
        return nullcontext()
    if adapter is None:
        return model.disable_adapter()
    model.set_adapter(adapter)
    return nullcontext()


def generate_batch(
    model: Any,
    tokenizer: Any,
    items: Sequence[BatchItem],
    *,
    max_new_tokens: int,
    prompt_tokens: int,
    batch_size: int = 8,
    stop_strings: Sequence[str] = (),
    select: bool = False,
    scorer: Any = None,
) -> list[str]:
    """The raw text of the greedy answers to ``items``, in their order (with ``select``: the candidates each adapter rates best, ``select_batch``).

    Args:
        model: the base model, or the PeftModel from ``attach_adapters``.
        tokenizer: the base model's tokenizer.
        items: questions with their passages and adapter names.
        max_new_tokens: the longest answer.
        prompt_tokens: the room for each prompt (``fit_prompt``); keep it at most the training
            ``max_length`` minus the answer so that an adapter never sees a longer prompt than it learned on.
        batch_size: prompts per forward pass.
        stop_strings: an answer ends when it writes one of these (kept in its text, as a streamed
            answer's stop criteria leave them, for the answer parser to cut).
        select: each answer is the passage sentence its adapter scores best (``selection``).
        scorer: with ``select``, the sentence scorer whose shortlist the adapter judges (``selection.SentenceScorer``;
            None: the adapter judges every sentence alone).
    """
    import torch

    if select:
        return select_batch(model, tokenizer, items, prompt_tokens=prompt_tokens, scorer=scorer)

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts = [fit_prompt(tokenizer, item.example, prompt_tokens) for item in items]
    groups: dict[str | None, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        groups[item.adapter].append(i)
    out: list[str | None] = [None] * len(items)
    device = next(model.parameters()).device
    stops: dict[str, Any] = {"stop_strings": list(stop_strings), "tokenizer": tokenizer} if stop_strings else {}
    for adapter, rows in groups.items():
        rows = sorted(rows, key=lambda i: len(prompts[i]))
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            width = max(len(prompts[i]) for i in chunk)
            ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, i in enumerate(chunk):
                ids[r, width - len(prompts[i]) :] = torch.tensor(prompts[i], dtype=torch.long)
                mask[r, width - len(prompts[i]) :] = 1
            with _context(model, adapter), torch.no_grad():
                output = model.generate(
                    input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens, do_sample=False,
                    pad_token_id=pad_id, eos_token_id=tokenizer.eos_token_id, **stops,
                )
            for r, i in enumerate(chunk):
                new = output[r, width:].tolist()
                if tokenizer.eos_token_id is not None and tokenizer.eos_token_id in new:
                    new = new[: new.index(tokenizer.eos_token_id)]
                while new and new[-1] == pad_id:
                    new.pop()
                out[i] = tokenizer.decode(new, skip_special_tokens=True)
    return [g for g in out if g is not None]


def select_batch(
    model: Any,
    tokenizer: Any,
    items: Sequence[BatchItem],
    *,
    prompt_tokens: int,
    scorer: Any = None,
) -> list[str]:
    """``selection``'s answers to ``items``, in their order: each the candidate its adapter scores best.

    One item at a time: its candidates share its prompt's cache (``selection.score_continuations``).

    Args:
        model, tokenizer, items, prompt_tokens, scorer: as for ``generate_batch``.
    """
    from .selection import select

    out: list[str] = []
    for item in items:
        with _context(model, item.adapter):
            out.append(select(model, tokenizer, item.example, prompt_tokens, scorer=scorer).text)
    return out


def cut_at_stops(text: str, stop_strings: Sequence[str]) -> str:
    """``text`` up to the first of ``stop_strings`` (a streamed answer stops there)."""
    cut = min((i for i in (text.find(s) for s in stop_strings if s) if i >= 0), default=len(text))
    return text[:cut]


def held_out_f1_scores(model: Any, tokenizer: Any, examples: Sequence[Example], adapter: str | None, *, max_new_tokens: int,
                       stop_strings: Sequence[str] = (), select: bool = False, scorer: Any = None) -> list[float]:
    """Each example's token F1 (``answer_metrics.token_f1``) of the greedy answer against its answer, in order; [] without examples.

    The activation gate compares an adapter's scores with the bare base model's (``adapter=None``) on
    the expert's held-out examples, question by question (``experts.services.answer_gate``).
    """
    from .answer_metrics import token_f1

    if not examples:
        return []
    room = int(getattr(getattr(model, "config", None), "max_position_embeddings", 2048)) - max_new_tokens
    items = [BatchItem(Example(e.question, "", list(e.passages), e.system_prompt, e.citation_format, whole=list(e.whole)), adapter) for e in examples]
    generated = generate_batch(model, tokenizer, items, max_new_tokens=max_new_tokens, prompt_tokens=room,
                               stop_strings=stop_strings, select=select, scorer=scorer)
    return [token_f1(cut_at_stops(g, stop_strings), e.answer, e.citation_format) for g, e in zip(generated, examples, strict=True)]
