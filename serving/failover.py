"""The failover loop: the router's candidates in order until one expert retrieved and produced its first output.

An expert whose circuit breaker is open is skipped; a vector store that cannot be reached
(``StoreUnavailable``) and an answer that failed even extractively (``GenerationError``) count on
the expert's breaker, and the next candidate answers. Each skipped expert is one entry of the
response's ``failover_from`` ({"slug", "reason"}).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from experts.breaker import breaker_for
from experts.generation import GenerationError
from experts.ml.extractive import Passage
from knowledge.stores import StoreUnavailable

from .expert_answer import Opened
from .route import AllExpertsDown

logger = logging.getLogger(__name__)

# (expert slugs, their router weights or None) → the passages the search found in their collections
Retrieve = Callable[[list[str], list[float] | None], list[Passage]]
# (answering expert, passages, stream?, the breaker an extractive answer counts on) → its first output
AnswerWith = Callable[[str, list[Passage], bool, Any], Opened]


@dataclass
class Answered:
    """The expert that answered, the passages it answered from, and its first output."""

    expert: str
    passages: list[Passage]
    opened: Opened


def skip(skipped: list[dict[str, str]], slug: str, reason: str, breaker: Any | None = None, request_id: str = "") -> None:
    """Fail ``slug`` over: count the failure on its breaker (when the expert was tried) and add it to ``skipped``."""
    if breaker is not None:
        breaker.record_failure(reason)
    skipped.append({"slug": slug, "reason": reason})
    logger.warning("chat.failover", extra={"expert": slug, "reason": reason, "request_id": request_id})


def first_answer(candidates: list[str], width: int, raw_scores: dict[str, float], *, retrieve: Retrieve, answer_with: AnswerWith,
                 stream: bool, skipped: list[dict[str, str]], request_id: str = "") -> Answered:
    """Walk ``candidates`` until one expert retrieved and produced its first output.

    With ``width`` 2 (``auto``) the next healthy candidate's passages are fused in, weighted by the
    router's ``raw_scores``, and the expert whose passage ranks first answers (its own adapter fits
    those passages best); if it fails, the candidate itself answers from the same passages. A
    half-open breaker's probe answers alone. A whole answer's success is recorded on its breaker
    here; a stream's, by the caller when the stream ends.

    Raises:
        AllExpertsDown: every candidate was skipped (``skipped`` says why).
    """
    failed: set[str] = set()
    for position, slug in enumerate(candidates):
        if slug in failed:
            continue
        breaker = breaker_for(slug)
        if not breaker.allow():
            skip(skipped, slug, "circuit_open", request_id=request_id)
            failed.add(slug)
            continue
        probing = breaker.state != "closed"
        partners = [] if probing else [s for s in candidates[position + 1 :] if s not in failed and breaker_for(s).state == "closed"][: width - 1]
        slugs = [slug, *partners]
        weights = [float(raw_scores.get(s, 0.0)) for s in slugs] if raw_scores else None
        try:
            passages = retrieve(slugs, weights)
        except StoreUnavailable:
            skip(skipped, slug, "store_unavailable", breaker, request_id)
            failed.add(slug)
            continue
        leading = passages[0].expert if passages else slug
        answerers = [leading, slug] if leading in partners else [slug]
        for answering in answerers:
            gen_breaker = breaker if answering == slug else breaker_for(answering)
            try:
                opened = answer_with(answering, passages, stream, gen_breaker)
            except GenerationError as exc:
                skip(skipped, answering, exc.kind, gen_breaker, request_id)
                failed.add(answering)
                continue
            if not stream:
                opened.breaker.record_success()
            return Answered(answering, passages, opened)
    raise AllExpertsDown(skipped)
