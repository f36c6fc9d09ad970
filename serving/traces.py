"""What a routing event keeps to explain its answer later (the console's trace page), and the abstention evidence.

A trace holds the router's evidence (its in-scope score against the version's abstain threshold,
every live expert's probability, the fallback), the passages retrieved (title, expert, document,
score, whether the answer cited it), for an extractive answer which sentence it quoted, why, and
the runner-up, and, when ``STORE_QUESTION_TEXT`` is on, the answer's text and the runner-up's:
what a domain team needs to see why a question went where it went. Passage texts are not copied
(the document is linked instead); retention deletes the trace with its event.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from routing.ml import conversation as conversation_rule

from .route import Decision

MAX_PASSAGES = 12
MAX_ANSWER_CHARS = 4000
MAX_SENTENCE_CHARS = 300


def routing_evidence(decision: Decision | None) -> dict[str, Any]:
    """Why the router chose, or abstained: its in-scope score and the threshold, and who it would have chosen.

    ``would_have_chosen`` is the best expert when the router abstained (None otherwise); ``fallback``
    the fallback expert that answered instead, if one is set.
    """
    if decision is None or decision.router_version is None:
        return {"routed": False}
    top = decision.experts[0]["slug"] if decision.experts else None
    return {
        "routed": True, "score": decision.score, "threshold": decision.threshold, "abstained": decision.abstained,
        "would_have_chosen": top if decision.abstained else None, "fallback": decision.fallback,
        # "fast": the router's fast tier chose (auto:fast), with its distilled encoder; "full": the sentence encoder.
        "encoder": decision.encoder,
        **({"degraded": decision.degraded} if decision.degraded else {}),
        **({"other_language": True} if decision.foreign else {}),  # refused: not in the language of the experts' documents
        **({"views": decision.views} if decision.views else {}),
        # Unsure of the question alone, the router ranked it with the conversation's earlier questions.
        **({"conversation": decision.conversation} if decision.conversation else {}),
    }


def build(decision: Decision | None, result: Any) -> dict[str, Any]:
    """The trace of one request (``result`` is the ``ChatResult``; None when the request failed before an answer)."""
    trace: dict[str, Any] = {"evidence": routing_evidence(decision)}
    if decision is not None and decision.raw_scores:
        trace["scores"] = dict(sorted(decision.raw_scores.items(), key=lambda kv: -kv[1]))
    if result is None:
        return trace
    if result.refusal:
        trace["refusal"] = result.refusal
    # The answer's citation marks in the order it gives them: [1] is ``result.citations[0]``.
    marks = {(c.get("document_id"), c.get("chunk_id")): mark for mark, c in enumerate(result.citations, start=1)}
    trace["passages"] = [
        {"index": p.get("index"), "title": str(p.get("title") or "")[:300], "expert": p.get("expert", ""), "document_id": p.get("document_id"),
         "score": p.get("score"), "source": str(p.get("source") or "")[:300], "url": str(p.get("url") or "")[:500],
         "cited": mark is not None, "cited_as": mark}
        for p in result.passages[:MAX_PASSAGES]
        for mark in [marks.get((p.get("document_id"), p.get("chunk_id")))]
    ]
    trace["citations"] = len(result.citations)
    if result.spelling:
        # The corrected words are the question's words: kept only where question text is.
        trace["spelling"] = result.spelling if settings.STORE_QUESTION_TEXT else {"corrected_words": len(result.spelling["corrections"])}
    if result.earlier_turns_searched:
        trace["earlier_turns_searched"] = result.earlier_turns_searched
    elif result.earlier_turns_left_out:
        trace["earlier_turns_left_out"] = result.earlier_turns_left_out
    if result.sticky and result.conversation_expert:
        # The answer stayed with the conversation's expert rather than the router's first choice (or rather than no expert).
        trace["kept_by_conversation"] = {"expert": result.conversation_expert, "from": result.conversation_expert_from,
                                         "margin": conversation_rule.STICKY_MARGIN}
    if len(result.experts_answering) > 1:  # each answered its part (``serving.breadth``)
        trace["experts_answering"] = result.experts_answering
    if result.asked:  # the question asked two, each of another expert: the part each answered (text only where question text is kept)
        trace["asked"] = result.asked if settings.STORE_QUESTION_TEXT else dict.fromkeys(result.asked, "")
    if result.clarify:  # the answer asked which of these experts the user means
        trace["clarify"] = result.clarify
    if result.choice:
        trace["chosen_after_clarify"] = result.choice
    if result.selection:
        trace["selection"] = _selection(result.selection)
    if settings.STORE_QUESTION_TEXT:
        trace["answer"] = (result.answer or "")[:MAX_ANSWER_CHARS]
    if result.finish_reason and result.finish_reason != "stop":
        trace["finish_reason"] = result.finish_reason
    return trace


def _selection(selection: dict[str, Any]) -> dict[str, Any]:
    """The extractive answer's choice as the trace keeps it: sentence texts only where question text is kept."""
    keep_text = settings.STORE_QUESTION_TEXT

    def one(item: dict[str, Any] | None, with_reasons: bool) -> dict[str, Any] | None:
        if not isinstance(item, dict):
            return None
        out = {k: item.get(k) for k in ("passage", "sentence", "score")}
        if with_reasons:
            out["reasons"] = [str(r) for r in item.get("reasons") or []][:5]
        if keep_text:
            out["text"] = str(item.get("text") or "")[:MAX_SENTENCE_CHARS]
        return out

    return {"quoted": [one(q, True) for q in selection.get("quoted") or []], "runner_up": one(selection.get("runner_up"), False),
            "candidates": selection.get("candidates")}
