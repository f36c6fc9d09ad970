"""``evaluate answers``' figures for two-expert answers and clarifying questions, from scored rows (no database)."""

from __future__ import annotations

from evaluation.scoring import Scored, summarise


def row(kind: str, *, clarified: bool = False, experts: int = 1, answer: str = "Apply online in 30 days.") -> Scored:
    return Scored(query_id=kind, question="?", answer=answer, expert="dmv", facts=["30 days"], kind=kind, clarified=clarified,
                  experts_answering=experts)


def test_clarify_precision_counts_the_questions_asked_back_that_were_ambiguous_and_recall_the_ambiguous_ones_asked_back():
    rows = [row("ambiguous", clarified=True), row("ambiguous", clarified=True), row("ambiguous"), row("single", clarified=True), row("single"),
            row("two_experts", experts=2, answer="DMV (dmv): Apply online in 30 days.\n\nSSA (ssa): Call us.")]
    figures = summarise(rows)
    assert figures["clarify_precision"] == round(2 / 3, 4)
    assert figures["clarify_recall"] == round(2 / 3, 4)
    assert figures["clarified"] == 0.5
    assert figures["two_answers"] == round(1 / 6, 4)
    assert figures["two_answers_by_kind"] == {"ambiguous": 0.0, "single": 0.0, "two_experts": 1.0}
    assert figures["mean_words"] == round((5 * 5 + 11) / 6, 4)


def test_clarify_precision_is_none_when_nothing_was_asked_back():
    figures = summarise([row("ambiguous"), row("single")])
    assert figures["clarify_precision"] is None
    assert figures["clarify_recall"] == 0.0
