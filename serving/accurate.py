"""``auto:accurate``: each of the top two healthy experts answers from its own passages, and the answers are merged."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from experts.breaker import breaker_for
from experts.generation import GenerationError
from experts.ml.extractive import Answer, Passage
from experts.models import Expert
from knowledge.stores import StoreUnavailable

from .expert_answer import Source
from .failover import AnswerWith, Retrieve, skip
from .route import AllExpertsDown

EXPERTS = 2  # how many experts answer


@dataclass
class Merged:
    """The merged answer, the parts it kept (the response's ``parts``), and the first expert's name, source and everyone's passages."""

    answer: Answer
    parts: list[dict[str, Any]]
    expert: str
    source: Source
    passages: list[Passage]


def answer_accurately(candidates: list[str], *, retrieve: Retrieve, answer_with: AnswerWith, skipped: list[dict[str, str]],
                      request_id: str = "") -> Merged:
    """The top ``EXPERTS`` healthy candidates answer whole from their own passages; their answers merged, best first.

    A candidate is skipped as in the failover loop (``serving.failover``): breaker open, store
    unreachable, or an answer that failed even extractively; the next one answers in its place.

    Raises:
        AllExpertsDown: no candidate answered (``skipped`` says why).
    """
    names = dict(Expert.objects.filter(slug__in=candidates).values_list("slug", "name"))
    parts: list[tuple[str, Answer, Source, list[Passage]]] = []
    for slug in candidates:
        if len(parts) == EXPERTS:
            break
        breaker = breaker_for(slug)
        if not breaker.allow():
            skip(skipped, slug, "circuit_open", request_id=request_id)
            continue
        try:
            passages = retrieve([slug], None)
        except StoreUnavailable:
            skip(skipped, slug, "store_unavailable", breaker, request_id)
            continue
        try:
            opened = answer_with(slug, passages, False, breaker)
        except GenerationError as exc:
            skip(skipped, slug, exc.kind, breaker, request_id)
            continue
        opened.breaker.record_success()
        assert isinstance(opened.output, Answer)
        parts.append((slug, opened.output, opened.source, passages))
    if not parts:
        raise AllExpertsDown(skipped)
    merged = merge_answers([(slug, names.get(slug, slug), answer, source.citation_format) for slug, answer, source, _ in parts])
    kept = [p for p in parts if p[1].grounded] or parts[:1]
    summary = [{"expert": slug, "grounded": answer.grounded, "citations": len(answer.citations), "answer_source": source.answer_source,
                "fallback_reason": source.fallback_reason, "adapter": source.adapter} for slug, answer, source, _ in kept]
    return Merged(merged, summary, parts[0][0], parts[0][2], [passage for p in parts for passage in p[3]])


def merge_answers(parts: list[tuple[str, str, Answer, str]]) -> Answer:
    """One answer from several experts' answers: each part labelled by its expert, citations renumbered.

    Args:
        parts: (slug, expert name, answer, citation format) per expert, best first. Parts that
            found nothing are left out when another part is grounded.
    """
    grounded = [p for p in parts if p[2].grounded]
    kept = grounded or parts[:1]
    texts, citations = [], []
    for slug, name, answer, fmt in kept:
        offset = len(citations)
        n = len(answer.citations)

        def renumber(m: re.Match[str], offset: int = offset, n: int = n, fmt: str = fmt) -> str:
            i = int(m.group(1))
            return fmt.replace("{index}", str(i + offset)) if 1 <= i <= n else m.group(0)

        text = _citation_pattern(fmt).sub(renumber, answer.text) if offset else answer.text
        texts.append(f"{name} ({slug}): {text}")
        citations.extend(answer.citations)
    return Answer(text="\n\n".join(texts), citations=citations, grounded=bool(grounded))


def _citation_pattern(citation_format: str) -> re.Pattern[str]:
    fmt = citation_format if "{index}" in citation_format else "[{index}]"
    return re.compile(re.escape(fmt).replace(re.escape("{index}"), r"(\d+)"))
