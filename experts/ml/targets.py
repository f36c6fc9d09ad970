"""Training targets from gold answers: the answer, cited to the retrieved passage that holds it. Pure: no Django.

A gold answer none of the passages holds would teach the adapter to state facts not in front of it,
so such questions are skipped, as weak retrievals are.
"""

from __future__ import annotations

from collections.abc import Sequence

from .answer_metrics import support
from .extractive import Passage
from .prompting import DEFAULT_CITATION_FORMAT, render_citation

# Share of the gold answer's words one passage must hold (chunk borders can cut a span, and the
# data's spans are sometimes re-spaced; a lower bar lets answers the passage does not hold through).
MIN_SUPPORT = 0.7


def supporting_passage(answer: str, passages: Sequence[Passage]) -> int | None:
    """The index (0-based) of the passage holding most of ``answer``, or None when none holds ``MIN_SUPPORT`` of it.

    Ties go to the better-ranked passage.
    """
    best, best_support = None, MIN_SUPPORT
    for i, passage in enumerate(passages):
        share = support(answer, passage.text)
        if share > best_support or (best is None and share >= best_support):
            best, best_support = i, share
    return best


def gold_target(answer: str, passages: Sequence[Passage], *, citation_format: str = DEFAULT_CITATION_FORMAT) -> str | None:
    """``answer`` followed by the marker of its supporting passage (numbered as in the prompt), or None.

    Args:
        answer: the gold answer.
        passages: the passages the prompt will show, best first (only those that fit the prompt).
        citation_format: the expert's marker format.
    """
    text = " ".join(answer.split())
    if not text:
        return None
    index = supporting_passage(text, passages)
    if index is None:
        return None
    return f"{text} {render_citation(index + 1, citation_format)}"
