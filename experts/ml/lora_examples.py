"""LoRA's examples as token ids: the prompt a model is shown, fitted to its room, and the answer it learns. Pure: no Django.

Training, the held-out evaluation and generation all build a prompt here, so serving shows the model
what it was trained on; a prompt too long for its room loses its least relevant passages first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .extractive import Passage
from .lora_errors import LoraError
from .prompting import DEFAULT_CITATION_FORMAT, build_messages

# The label of a token not learned (the prompt's, the padding's): cross-entropy ignores it.
IGNORE_INDEX = -100


@dataclass
class Example:
    """One training or evaluation example: the prompt's parts and the answer to learn."""

    question: str
    answer: str
    passages: list[Passage] = field(default_factory=list)
    system_prompt: str = ""
    citation_format: str = DEFAULT_CITATION_FORMAT
    # The passages ``passages`` were cut from, in the same order: select decoding ranks their sentences
    # whole, as the extractive answer does (``selection.plan_selection``). Empty: ``passages`` as they are.
    whole: list[Passage] = field(default_factory=list)


def check_examples(examples: Sequence[Example], *, min_examples: int) -> None:
    """Refuse data that cannot train anything: too few examples, empty questions or answers."""
    if len(examples) < min_examples:
        raise LoraError(f"{len(examples)} training examples; at least {min_examples} are needed")
    empty = [i for i, e in enumerate(examples, start=1) if not e.answer.strip() or not e.question.strip()]
    if empty:
        raise LoraError(f"{len(empty)} examples have an empty question or answer (e.g. #{empty[0]}); fix or delete them")


def render_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The text the model continues for these chat messages (its chat template, or a plain fallback)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    # A base model without a chat template: plain role-prefixed turns.
    turns = "".join(f"{m['role'].capitalize()}: {m['content']}\n\n" for m in messages)
    return (tokenizer.bos_token or "") + turns + "Assistant: "


def fit_prompt(tokenizer: Any, example: Example, room: int, history: Sequence[dict[str, str]] = ()) -> list[int]:
    """The prompt's token ids in at most ``room`` tokens.

    The least relevant passages (the last ones) are dropped first, so the rules at the start and
    the question at the end survive; only a prompt still too long without passages is cut from
    the left.
    """
    return _fit(tokenizer, example, room, history)[0]


def fitted_passages(tokenizer: Any, example: Example, room: int, history: Sequence[dict[str, str]] = ()) -> int:
    """How many of the example's passages (the first ones) its prompt keeps in ``room`` tokens."""
    return _fit(tokenizer, example, room, history)[1]


def _fit(tokenizer: Any, example: Example, room: int, history: Sequence[dict[str, str]]) -> tuple[list[int], int]:
    passages = list(example.passages)
    while True:
        messages = build_messages(example.question, passages, history=history, system_prompt=example.system_prompt,
                                  citation_format=example.citation_format)
        ids = tokenizer(render_prompt(tokenizer, messages), add_special_tokens=False)["input_ids"]
        if len(ids) <= room or not passages:
            return (ids[-room:] if room > 0 else []), len(passages)
        passages.pop()


def encode_example(tokenizer: Any, example: Example, max_length: int) -> tuple[list[int], list[int]]:
    """Input ids and labels for one example; only the answer (and its end token) is learned.

    The answer is kept whole when it fits (cut to leave a little prompt otherwise); the prompt gets
    the remaining room (``fit_prompt``).
    """
    answer_ids = tokenizer(example.answer.strip(), add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id is not None:
        answer_ids = [*answer_ids, tokenizer.eos_token_id]
    answer_ids = answer_ids[: max_length - 8]
    prompt_ids = fit_prompt(tokenizer, example, max_length - len(answer_ids))
    return prompt_ids + answer_ids, [IGNORE_INDEX] * len(prompt_ids) + answer_ids


def collate(batch: list[tuple[list[int], list[int]]], pad_id: int):
    """One padded batch (input ids, attention mask, labels as torch tensors) of ``encode_example``'s pairs."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (ids, labs) in enumerate(batch):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(labs)] = torch.tensor(labs)
        mask[i, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}
