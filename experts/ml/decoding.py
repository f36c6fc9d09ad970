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

``span_copy`` is the strict form: the answer is a run of spans copied from its prompt. Once it has
started copying at some place, its next token must continue one of the places it could be copying
from; it may jump to a new place only at its start and after a token that ends a sentence or a
citation (". ", "]"). A citation marker's opening and the end-of-text token are allowed there too, and
where its source runs out, but not inside a copied span: measured on doc2dial's validation split, a
rule that let it cite or stop anywhere cut answers short ("The [1]"; routed LoRA F1 0.176 against
0.226 decoding freely). The model still chooses where to start, what to leave out, when to cite and
when to stop, and the abstention sentence is in the prompt's rules; what it can no longer do is change
the passages' words ("the title is not revamped") or state what no passage says.
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


_SENTENCE_END = (".", "!", "?", ":", ";", "]", ")")
_SPACE_MARKS = ("\u0120", "\u2581")  # how byte-level BPE ("Ġ") and sentencepiece ("▁") spell a leading space


def _unspaced(tokenizer: Any, token_id: int) -> int | None:
    """The id of ``token_id``'s token without its leading space mark, when the vocabulary has one (an answer's first word has none)."""
    token = tokenizer.convert_ids_to_tokens(int(token_id))
    if not isinstance(token, str) or len(token) < 2 or token[0] not in _SPACE_MARKS:
        return None
    other = tokenizer.convert_tokens_to_ids(token[1:])
    return None if other is None or other == tokenizer.unk_token_id else int(other)


def span_copy(prompts: Sequence[Sequence[int]], start: int, tokenizer: Any, always: Iterable[int | None] = ()) -> Any:
    """A transformers LogitsProcessor letting row r write only spans of ``prompts[r]`` (see the module's text).

    Args:
        prompts: each row's prompt token ids (what it may copy from).
        start: where the answers begin in ``input_ids`` (the padded prompt width).
        tokenizer: the model's tokenizer (to tell which tokens end a sentence).
        always: ids allowed wherever a jump is (the end-of-text token, a citation marker's opening); None is skipped.
    """
    import torch
    from transformers import LogitsProcessor

    extra = sorted({int(t) for t in always if t is not None})
    ends: dict[int, bool] = {}

    def ends_sentence(token_id: int) -> bool:
        if token_id not in ends:
            text = tokenizer.decode([token_id]).strip()
            ends[token_id] = bool(text) and (text.endswith(_SENTENCE_END) or "\n" in tokenizer.decode([token_id]))
        return ends[token_id]

    class Row:
        def __init__(self, prompt: Sequence[int]) -> None:
            self.prompt = [int(t) for t in prompt]
            self.where: dict[int, list[int]] = {}
            for p, t in enumerate(self.prompt):
                self.where.setdefault(t, []).append(p)
            for t in list(self.where):  # an answer's first word is written without its leading space
                other = _unspaced(tokenizer, t)
                if other is not None and other not in self.where:
                    self.where[other] = self.where[t]
            self.anywhere = torch.tensor(sorted(set(self.where) | set(extra)), dtype=torch.long)
            self.at: list[int] = []  # positions of the prompt the answer may be copying from
            self.free = True  # may jump to any place of the prompt
            self.seen = 0

        def step(self, token: int) -> None:
            followed = [p + 1 for p in self.at if p + 1 < len(self.prompt) and self.prompt[p + 1] == token]
            self.at = followed or list(self.where.get(token, ()))
            self.free = ends_sentence(token)

        def allowed(self) -> Any:
            if self.free:
                return self.anywhere
            nexts = {self.prompt[p + 1] for p in self.at if p + 1 < len(self.prompt)}
            if not nexts:  # its source ran out (or it wrote a marker the prompt lacks): cite or stop
                return torch.tensor(extra, dtype=torch.long)
            return torch.tensor(sorted(nexts), dtype=torch.long)

    rows = [Row(prompt) for prompt in prompts]

    class SpanCopy(LogitsProcessor):
        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            written = input_ids.shape[1] - start
            for r, row in enumerate(rows):
                for token in input_ids[r, start + row.seen : start + written].tolist():
                    row.step(int(token))
                row.seen = written
                keep = row.allowed()
                masked = torch.full_like(scores[r], float("-inf"))
                masked[keep] = scores[r, keep]
                scores[r] = masked
            return scores

    return SpanCopy()


def marker_openings(tokenizer: Any, marker: str) -> list[int]:
    """The first token of ``marker`` (e.g. "[1]") as written after a space and straight after a word: allowed by ``span_copy`` wherever it may jump."""
    firsts = set()
    for text in (f" {marker}", marker):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if ids:
            firsts.add(int(ids[0]))
    return sorted(firsts)


def processors(*items: Any) -> list[Any]:
    """The logits processors among ``items`` that are on (not None)."""
    return [p for p in items if p is not None]
