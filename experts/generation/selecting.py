"""Select decoding as both language-model backends serve it (``selection.DECODING``, "select").

The in-process backend scores the options with its own model, the vLLM backend with ``VLLM_SELECT``
asks its server for the same numbers (``prompt_logprobs``); everything around the scores is here, so
an expert answers the same way on a laptop and on a GPU server: ``shown_passages`` (what the model is
shown, in the shape adapters learn from), ``sentence_scorer`` and ``chosen_answer``/``stream_chosen``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from experts.ml.citations import CitationStream, parse_answer
from experts.ml.extractive import Answer, Passage, quoted
from experts.ml.prompting import LEAD_SENTENCE, PASSAGE_CHARS, SHOWN_PASSAGES, STOPS, focus
from experts.ml.selection import DECODING, SHORTLIST, Selected, SentenceScorer

from .base import GenerationRequest
from .extractive import chunk_cache, first_choices

# "free": the model writes its answer token by token; "select": it chooses the passage sentence it
# rates best as the answer (experts.ml.selection), unless the request asks for sampling (temperature > 0).
DECODINGS = ("free", "select")
_WORDS = re.compile(r"\S+\s*")  # a chosen answer is streamed a word at a time


def check_decoding(decoding: str) -> str:
    if decoding not in DECODINGS:
        raise ValueError(f"decoding must be one of {', '.join(DECODINGS)}, not {decoding!r}")
    return decoding


def selects(decoding: str, request: GenerationRequest) -> bool:
    """Whether ``request``'s answer is chosen rather than written: sampling (temperature > 0) asks the model to write."""
    return decoding == "select" and not (request.temperature and request.temperature > 0)


def weak(request: GenerationRequest, min_score: float) -> bool:
    """Whether the request's passages are too weak to answer from (none, or the best below ``min_score``): "not found"."""
    return not request.passages or max(p.score for p in request.passages) < min_score


def shown_passages(request: GenerationRequest, *, max_passages: int, passage_chars: int, lead_sentence: bool, shortlist: int = 0) -> list[Passage]:
    """The passages the model is shown: the best ``max_passages``, each cut to its ``passage_chars`` most relevant characters.

    The extractive answer's ``shortlist`` best sentences (``extractive.first_choices``: with select decoding, the
    options the model judges) are kept in their passages whatever the cut. With ``lead_sentence`` the first of them
    is also named at the end of the reference material (``prompting.render_passages``).
    """
    passages = list(request.passages[:max_passages])
    best = first_choices(replace(request, passages=passages), max(shortlist, int(lead_sentence)), max_passages=len(passages))  # ranked as plan_selection ranks them
    if lead_sentence and best:
        passages = [replace(p, lead=quoted(best[0].text) if i == best[0].passage else "") for i, p in enumerate(passages, start=1)]
    keep: dict[int, list[str]] = {}
    for r in best[: max(shortlist, 1)]:
        keep.setdefault(r.passage, []).append(r.text)
    return [replace(p, text=focus(p.text, request.question, passage_chars, keep=keep.get(i, ()))) for i, p in enumerate(passages, start=1)]


def sentence_scorer(shortlist: int, spec: str | dict[str, Any] | None) -> SentenceScorer | None:
    """The scorer whose ``shortlist`` best sentences the model judges (the extractive answer's, on the process's
    sentence encoder); None when ``shortlist`` is 0: the model judges every sentence alone."""
    if shortlist < 0:
        raise ValueError(f"the select shortlist must be 0 or more sentences, not {shortlist}")
    if not shortlist:
        return None
    from encoders import get_encoder

    encoder = get_encoder()
    return SentenceScorer(encoder.encode, spec, shortlist=shortlist, cache=chunk_cache(encoder.name))


def citation_stream(request: GenerationRequest, max_passages: int, stop_at_paragraph: bool) -> CitationStream:
    """Reads the model's text as the shown passages number them (``[n]`` is ``request.passages[n - 1]``)."""
    return CitationStream(request.passages[:max_passages], request.citation_format, stops=STOPS, stop_at_paragraph=stop_at_paragraph)


def chosen_answer(request: GenerationRequest, chosen: Selected, *, max_passages: int, stop_at_paragraph: bool, min_score: float) -> Answer:
    """``chosen`` read as a written answer is (its marker mapped to its passage), with why it was chosen."""
    answer = parse_answer(chosen.text, request.passages[:max_passages], citation_format=request.citation_format, min_score=min_score,
                          question=request.question, stops=STOPS, stop_at_paragraph=stop_at_paragraph)
    answer.selection = chosen.choice if answer.grounded else None  # why this sentence, as the extractive answer says
    return answer


def stream_chosen(request: GenerationRequest, chosen: Selected, *, max_passages: int, stop_at_paragraph: bool,
                  min_score: float) -> Iterator[str | Answer]:
    """A chosen answer streamed as a written one is: word by word through the citation stream, then the answer."""
    citations = citation_stream(request, max_passages, stop_at_paragraph)
    for piece in _WORDS.findall(chosen.text):
        shown = citations.feed(piece)
        if shown:
            yield shown
        if citations.stopped:
            break
    tail, answer = citations.finish(request.question, min_score=min_score, streamed=True)
    if tail:
        yield tail
    answer.selection = chosen.choice if answer.grounded else None
    yield answer


def kept_choices(decoding: str, shortlist: int) -> int:
    """How many of the extractive answer's first choices the shown passages keep: the shortlist the model judges
    with select decoding, none otherwise (``shown_passages``)."""
    return max(0, int(shortlist)) if decoding == "select" else 0


def shown_shape() -> dict[str, Any]:
    """``shown_passages``' arguments as both backends serve them: what the model is shown, and the adapters learn from."""
    return {"max_passages": SHOWN_PASSAGES, "passage_chars": PASSAGE_CHARS, "lead_sentence": LEAD_SENTENCE,
            "shortlist": kept_choices(DECODING, SHORTLIST)}
