"""Answers the adapter chooses rather than writes: each passage sentence scored as the answer. Pure: no Django.

A small fine-tuned model judges which part of the passages answers better than it writes it out.
``select`` decoding scores every candidate (a sentence of a shown passage, followed by its marker
and the end token, as training targets are written) by the
adapter's mean log-probability per token, over one shared prompt cache; the answer is a verbatim,
cited copy of the documents. Without a scorer ``NOT_FOUND`` is one more candidate. With a ``scorer``
the adapter judges the scorer's ``SHORTLIST`` best sentences and the answer has the best ``scorer +
LM_WEIGHT x mean log-probability``; the passages' weak evidence, not the model, decides "not found".
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .extractive import NOT_FOUND, ChunkSentenceCache, Passage, Ranking, quoted, rank_sentences, split_sentences
from .lora_examples import Example, fit_prompt, fitted_passages
from .prompting import DEFAULT_CITATION_FORMAT, clean_passage_text, render_citation
from .sentence_scorer import FEATURES, SentenceModel, load_scorer, reasons

# Padded candidate positions per forward pass: candidates of similar length go together, so little
# of a pass is padding (a pass's cost grows with its rows x the longest candidate).
BATCH_TOKENS = 512
# The scorer's best sentences the adapter judges, and the weight of its mean log-probability per token
# against the scorer's score: the largest weight within one standard error of the best on doc2dial's
# validation split, so the scorer chooses and the adapter breaks near-ties (figures: docs/EVALUATIONS.md).
SHORTLIST = 2
LM_WEIGHT = 0.25
# How a served model answers, in-process or through vLLM (``experts.generation.selecting``): "select", the passage
# sentence it rates best, verbatim and cited; "free", written token by token (a request asking for sampling always
# is). "select" scored higher on doc2dial's validation split (docs/EVALUATIONS.md).
DECODING = "select"


@dataclass(frozen=True)
class Candidate:
    """One answer the adapter may choose: ``text`` from passage ``passage`` (1-based), or the abstention (``passage`` 0)."""

    text: str
    passage: int
    sentence: int = field(default=0, compare=False)  # its first sentence's 1-based place in the passage (0: the abstention)

    def target(self, citation_format: str = DEFAULT_CITATION_FORMAT) -> str:
        """As a training target is written: the text, then its passage's marker."""
        return self.text if not self.passage else f"{self.text} {render_citation(self.passage, citation_format)}"

    def answer(self, citation_format: str = DEFAULT_CITATION_FORMAT) -> str:
        """As the answer quotes it once chosen: ``target`` as the extractive answer quotes a sentence (``extractive.quoted``).

        The model judges the candidate as the prompt shows it, heading included (and learns from it so);
        the reader gets the sentence, as from the extractive answer.
        """
        return self.text if not self.passage else f"{quoted(self.text)} {render_citation(self.passage, citation_format)}"


def candidates(passages: Sequence[Passage], *, abstain: bool = True, citation_format: str = DEFAULT_CITATION_FORMAT) -> list[Candidate]:
    """Every sentence of each passage (as the prompt shows it), and the abstention.

    Single sentences: on doc2dial's validation split pairs of neighbouring sentences scored lower, at twice
    the cost (docs/EVALUATIONS.md)."""
    out: list[Candidate] = []
    seen: set[tuple[str, int]] = set()
    for number, passage in enumerate(passages, start=1):
        for place, sentence in enumerate(split_sentences(clean_passage_text(passage.text, citation_format)), start=1):
            sentence = sentence.strip()
            if sentence and (sentence, number) not in seen:
                seen.add((sentence, number))
                out.append(Candidate(sentence, number, place))
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
        # only the last position's logits are read: the vocabulary projection of the other ~450 is ~1/5 of the pass
        head = model(input_ids=torch.tensor([list(prompt_ids[done:])], device=device), cache=past, use_cache=True, logits_to_keep=1)
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


def choose(scores: Sequence[tuple[float, int]]) -> int:
    """The index of the best candidate: its mean log-probability per token (powers 0.5 and 0.75 of the length scored
    lower on doc2dial's validation split, docs/CONFIGURATION.md)."""
    if not scores:
        raise ValueError("no candidates to choose from")
    return max(range(len(scores)), key=lambda i: scores[i][0] / max(1, scores[i][1]))


@dataclass(frozen=True)
class Selected:
    """What ``select`` chose: the answer as the model would have written it (marker included)."""

    text: str
    # With a scorer, the choice as the extractive answer reports its own (``extractive.Answer.selection``):
    # the chosen sentence with why, the runner-up, how many sentences were scored. None: no scorer, or the abstention won.
    choice: dict[str, Any] | None = None


class SentenceScorer:
    """The extractive answer's sentence scorer over candidates (``sentence_scorer``'s model of their features),
    and how ``select`` uses it: the adapter judges its ``shortlist`` best, with its log-probability weighing ``weight``.

    Each passage's candidates are its sentences in order (as ``candidates`` lists them), so the features
    that read a sentence's neighbours and its passage's rank mean what they mean to the extractive answer.

    Args:
        embed: L2-normalised vectors for a list of texts (the question first).
        scorer: the sentence model, or a ``sentence_scorer.load_scorer`` spec (None: the shipped one).
        shortlist: sentences the adapter judges (at least 1).
        weight: of the adapter's mean log-probability per token against the scorer's score.
        cache: chunk sentence vectors already computed (``extractive.ChunkSentenceCache``), or None.
    """

    def __init__(self, embed: Callable[[list[str]], Any], scorer: SentenceModel | str | dict[str, Any] | None = None, *, shortlist: int = SHORTLIST,
                 weight: float = LM_WEIGHT, cache: ChunkSentenceCache | None = None) -> None:
        if shortlist < 1:
            raise ValueError(f"the shortlist holds at least one sentence, not {shortlist}")
        self.embed = embed
        self.model = load_scorer(scorer)
        self.shortlist = int(shortlist)
        self.weight = float(weight)
        self.cache = cache  # the extractive answer's chunk sentence cache: a passage it read is not encoded again

    def rank(self, question: str, passages: Sequence[Passage]) -> Ranking | None:
        """Every sentence of ``passages`` (whole), best first, as the extractive answer ranks them (``extractive.rank_sentences``)."""
        return rank_sentences(question, list(passages), self.embed, max_passages=len(passages), cache=self.cache, scorer=self.model)


def shortlist_choice(options: Sequence[Candidate], scorer_scores: Sequence[float], lm_scores: Sequence[tuple[float, int]],
                     weight: float = LM_WEIGHT) -> int:
    """The index (into ``options``) of the answer: the best ``scorer + weight x mean log-probability per token``
    among the sentences; the abstention only when there is no sentence (``scorer_scores`` are ignored for it)."""
    per_token = [total / max(1, n) for total, n in lm_scores]
    answers = [k for k, c in enumerate(options) if c.passage]
    if not answers:
        return next(k for k, c in enumerate(options) if not c.passage)
    return max(answers, key=lambda k: scorer_scores[k] + weight * per_token[k])


@dataclass(frozen=True)
class SelectionPlan:
    """What a model must score to ``select`` an answer: the prompt's ids and each option's continuation ids.

    Built by ``plan_selection`` without the model, so any backend that can score continuations (the
    in-process model, ``score_continuations``; a vLLM server's prompt log-probabilities) chooses the
    same way: ``decide`` turns its scores into the answer.
    """

    prompt: list[int]
    options: list[Candidate]  # the shortlisted sentences (all of them without a scorer), then the abstention (with a scorer, only without a sentence)
    continuations: list[list[int]]  # each option's tokens as the model would write them (``candidate_ids``)
    citation_format: str = DEFAULT_CITATION_FORMAT
    scorer: SentenceScorer | None = None  # whose shortlist the options are (None: every sentence)
    rated: list[float] = field(default_factory=list)  # the scorer's score of each shortlisted option
    features: np.ndarray | None = None  # the scorer's features of every sentence it read
    keep: list[int] = field(default_factory=list)  # the shortlisted options' rows in ``features``


def plan_selection(tokenizer: Any, example: Example, room: int, *, history: Sequence[dict[str, str]] = (),
                   scorer: SentenceScorer | None = None, scorer_question: str = "") -> SelectionPlan:
    """The prompt (built as generation builds it, ``lora_examples.fit_prompt`` in ``room`` tokens) and the options the model
    scores: the sentences of the passages that prompt holds and the abstention, or with ``scorer`` its shortlist (the
    abstention only where the passages hold no sentence).

    The scorer ranks the sentences of the shown passages whole (``example.whole``, where the prompt shows them
    cut), exactly as the extractive answer ranks them, so its shortlist is the extractive answer's first choices
    (``selecting.shown_passages`` keeps them in the cut). It reads ``scorer_question`` where given (the
    question as searched, its spelling corrected), as the extractive answer does.
    """
    prompt = fit_prompt(tokenizer, example, room, history=history)
    fitted = fitted_passages(tokenizer, example, room, history=history)
    fmt = example.citation_format
    abstain = Candidate(NOT_FOUND, 0)
    if scorer is None:
        options = candidates(list(example.passages)[:fitted], citation_format=fmt)
        return SelectionPlan(prompt, options, [candidate_ids(tokenizer, c, fmt) for c in options], fmt)
    whole = list(example.whole or example.passages)[:fitted]
    ranking = scorer.rank(scorer_question or example.question, whole)
    best = ranking.sentences[: scorer.shortlist] if ranking is not None else []
    options = [Candidate(clean_passage_text(r.text, fmt), r.passage, r.sentence) for r in best]
    if not options:
        options.append(abstain)
    features = ranking.features if ranking is not None else np.zeros((0, len(FEATURES)))
    return SelectionPlan(prompt, options, [candidate_ids(tokenizer, c, fmt) for c in options], fmt, scorer, [r.score for r in best],
                         features, [r.row for r in best])


def decide(plan: SelectionPlan, scores: Sequence[tuple[float, int]]) -> Selected:
    """The answer ``plan``'s options and the model's ``scores`` of them (summed log-probability, tokens) give:
    without a scorer the best mean log-probability (``choose``), with one ``shortlist_choice``, and why."""
    if len(scores) != len(plan.options):
        raise ValueError(f"{len(scores)} scores for {len(plan.options)} options")
    options, scorer = plan.options, plan.scorer
    if scorer is None:
        best = choose(scores)
        return Selected(options[best].answer(plan.citation_format))
    shortlisted = plan.rated + [0.0] * (len(options) - len(plan.rated))
    best = shortlist_choice(options, shortlisted, scores, scorer.weight)
    choice = None
    if options[best].passage:
        row = plan.keep[best]
        why = reasons(plan.features, row, scorer.model.local_weights(plan.features, row))
        choice = _choice(options[: len(plan.rated)], shortlisted, scores, best, scorer.weight, why, len(plan.features))
    return Selected(options[best].answer(plan.citation_format), choice)


def select(model: Any, tokenizer: Any, example: Example, room: int, *, scorer: SentenceScorer | None = None) -> Selected:
    """The candidate ``model`` (with its active adapter) rates best as the answer to ``example``'s prompt
    (``plan_selection``, ``score_continuations``, ``decide``).

    With ``scorer``, the model judges only its shortlist (and the abstention), by ``shortlist_choice``;
    without, every sentence, by its mean log-probability alone.
    """
    plan = plan_selection(tokenizer, example, room, scorer=scorer)
    return decide(plan, score_continuations(model, plan.prompt, plan.continuations))


def _choice(shortlist: Sequence[Candidate], rated: Sequence[float], scores: Sequence[tuple[float, int]], best: int, weight: float,
            why: list[str], scored: int) -> dict[str, Any]:
    """The choice among ``shortlist`` as the extractive answer reports its own (``extractive.Answer.selection``): the chosen
    sentence with ``why`` and whether the model agreed with the scorer, the runner-up, how many sentences the scorer read."""
    combined = [rated[k] + weight * scores[k][0] / max(1, scores[k][1]) for k in range(len(shortlist))]

    def where(k: int) -> dict[str, Any]:
        return {"passage": shortlist[k].passage, "sentence": shortlist[k].sentence, "score": round(combined[k], 3), "text": quoted(shortlist[k].text)}

    agreed = best == max(range(len(shortlist)), key=lambda k: rated[k])
    others = sorted((k for k in range(len(shortlist)) if k != best), key=lambda k: -combined[k])
    return {"quoted": [{**where(best), "reasons": [*why, "the expert's model agreed" if agreed else "the expert's model preferred it to the scorer's first choice"]}],
            "runner_up": where(others[0]) if others else None, "candidates": scored, "decoding": "select", "shortlist": len(shortlist)}
