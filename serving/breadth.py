"""How many experts a routed question needs: one, both of the top two (a two-part answer), or the user's choice (a clarifying question).

Read from what routing already has: the two most probable experts' probabilities (``Decision.raw_scores``,
with the documents' evidence where the router weighs it) and how well each one's documents match the
question (the best dense cosine in its collection, ``knowledge.evidence``; from ``Decision.views`` where the
router looked it up, else looked up here). ``tools/choose_top2.py`` chose the thresholds.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from experts.ml.answer_type import parts
from experts.selectors import experts_by_slug

from .route import Decision

logger = logging.getLogger(__name__)

ONE, BOTH, CLARIFY = "one", "both", "clarify"
# Chosen on doc2dial's validation split (tools/choose_top2.py): each of its questions belongs to one agency, and
# at most 5% of them get two answers, and at most 5% would be asked back, at the loosest thresholds that allow it.
CLOSE = 0.25  # the runner-up's probability over the first's, at least: the router cannot tell the two apart
STRONG_MATCH = 0.53  # both experts' documents match at least this well (best dense cosine): each answers its part
MATCH_GAP = 0.02  # the two experts' best matches differ by at most this: the documents do not settle it either
# Each question of a question that asks two goes to its own expert where the router is at least this sure of each
# ("Can I get VA disability, and how soon can I start Social Security retirement?"): the loosest on a grid of 0.5-0.95
# under which none of doc2dial's 18 validation questions that ask two (each about one agency) is split between experts
# (tools/choose_top2.py; the closest false split was at 0.86).
PART_CONFIDENT = 0.9
# Each part of a two-expert answer, in words: two parts with their experts' names run to ~85 words, past one answer's
# 60 (experts.ml.extractive.ANSWER_WORDS). Not chosen on data: no validation split has questions that span two experts.
PART_WORDS = 40
CLARIFY_LEAD = "Which do you mean"  # how a clarifying question starts: a client sends it back in its messages
_SENTENCE_END = re.compile(r"(?<=[.!])\s+(?=[A-Z])")
_SLUG = re.compile(r"\(([A-Za-z0-9_-]+)\)")


@dataclass(frozen=True)
class Signals:
    """The two most probable experts, their probabilities and their documents' best match (None: not known)."""

    first: str
    second: str
    p_first: float
    p_second: float
    match_first: float | None
    match_second: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def signals(decision: Decision, question: str = "") -> Signals | None:
    """``decision``'s two most probable experts and their evidence; None where fewer than two experts are live."""
    ranked = sorted(decision.raw_scores.items(), key=lambda kv: -kv[1])[:2]
    if len(ranked) < 2:
        return None
    (a, pa), (b, pb) = ranked
    known = decision.views.get("knowledge") or {}
    matches = [(known.get(slug) or {}).get("best_match") for slug in (a, b)]
    if None in matches and decision.vector and decision.encoder == "full":
        matches = _best_matches([a, b], decision.vector, question)
    return Signals(a, b, float(pa), float(pb), *matches)


def _best_matches(slugs: list[str], vector: list[float], question: str) -> list[float | None]:
    """Each expert's best dense cosine in its own collection (None: no documents, or the store cannot be read)."""
    from knowledge.evidence import evidence_lookup
    from knowledge.stores import StoreUnavailable

    try:
        found = evidence_lookup(slugs)(list(range(len(slugs))), vector, question)
    except StoreUnavailable as exc:
        logger.warning("serving.breadth.unavailable", extra={"error": str(exc)[:200]})
        return [None] * len(slugs)
    return [None if f is None or math.isnan(f[0]) else round(float(f[0]), 3) for f in found]


def decide(found: Signals | None, *, conversation: bool) -> str:
    """``BOTH`` where the router cannot tell the two experts apart and both one's documents hold the question; ``CLARIFY``
    where it cannot, their documents do not settle it either and no earlier turn of the conversation (``conversation``)
    can; else ``ONE``."""
    if found is None or found.match_first is None or found.match_second is None or found.p_first <= 0:
        return ONE
    if found.p_second / found.p_first < CLOSE:
        return ONE
    if min(found.match_first, found.match_second) >= STRONG_MATCH:
        return BOTH
    return CLARIFY if abs(found.match_first - found.match_second) <= MATCH_GAP and not conversation else ONE


def split_between(question: str, route_part: Callable[[str], Decision]) -> dict[str, str] | None:
    """The parts of a question that asks two or more (``answer_type.parts``) by the expert each belongs to, where they
    belong to exactly two experts and the router (``route_part``) is at least ``PART_CONFIDENT`` sure of each; else None.
    A part's expert answers that part, with what the user said before the first question: {slug: its part (two parts for
    the same expert joined)}."""
    asked = parts(question)
    if len(asked) < 2:
        return None
    # What the user said before asking ("I'm an international student on an F-1 visa.") belongs to every part.
    said = _SENTENCE_END.split(asked[0])
    preamble = " ".join(said[:-1])
    owners: dict[str, list[str]] = {}
    for i, part in enumerate(asked):
        d = route_part(part)
        top = max(d.raw_scores.items(), key=lambda kv: kv[1], default=None)
        if d.abstained or top is None or top[1] < PART_CONFIDENT:
            return None
        # After the preamble a later part starts a sentence of its own ("... New York. Can I get federal student aid?").
        owners.setdefault(top[0], []).append(part if i == 0 or not preamble else f"{preamble} {part[:1].upper()}{part[1:]}")
    return {slug: " ".join(own) for slug, own in owners.items()} if len(owners) == 2 else None


def clarify_choices(found: Signals) -> list[dict[str, str]]:
    """The two experts as the response's ``switchboard.clarify`` lists them: slug and display name."""
    rows = experts_by_slug([found.first, found.second])
    return [{"slug": slug, "name": rows[slug].name if slug in rows else slug} for slug in (found.first, found.second)]


def clarify_text(choices: list[dict[str, str]]) -> str:
    """The clarifying question: each choice by name with its slug in brackets (``after_clarify`` reads them back)."""
    named = " or ".join(f"{c['name']} ({c['slug']})" for c in choices)
    return f"{CLARIFY_LEAD}: {named}? Reply with one of them and its expert will answer your question."


def after_clarify(history: list[dict[str, str]], reply: str, model: str) -> tuple[str, str] | None:
    """The expert the user chose in answer to a clarifying question, and the question it asked about; None: not such a reply.

    ``history``'s last message (system messages aside) must be the clarifying question, and ``model`` one of
    its choices' slugs, or ``reply`` must name one (its slug or name). Only choices that are experts count:
    the caller checks the user may ask it.
    """
    said = [m for m in history if m.get("role") != "system"]
    if not said or said[-1].get("role") != "assistant" or not said[-1].get("content", "").startswith(CLARIFY_LEAD):
        return None
    original = next((m["content"] for m in reversed(said[:-1]) if m.get("role") == "user" and m.get("content", "").strip()), "")
    rows = experts_by_slug(_SLUG.findall(said[-1]["content"]))
    if not original or not rows:
        return None
    if model in rows:
        return model, original
    text = reply.lower()
    for slug, row in rows.items():
        if re.search(rf"\b{re.escape(slug.lower())}\b", text) or row.name.lower() in text:
            return slug, original
    return None
