"""Gold answers as training targets: cited to the passage that holds them, or skipped."""

from __future__ import annotations

from experts.ml.extractive import Passage
from experts.ml.targets import gold_target, supporting_passage

PASSAGES = [
    Passage("Registration needs proof of insurance and a title.", "Registration"),
    Passage("Renew your driver license online up to a year before it expires.", "Renewals"),
    Passage("Renew your license online.", "Short"),
]


def test_the_gold_answer_is_cited_to_the_passage_holding_it_numbered_as_in_the_prompt():
    answer = "Renew your driver license online up to a year before it expires."
    assert supporting_passage(answer, PASSAGES) == 1
    assert gold_target(f"  {answer} ", PASSAGES) == f"{answer} [2]"
    assert gold_target(answer, PASSAGES, citation_format="(source {index})") == f"{answer} (source 2)"


def test_an_answer_none_of_the_passages_holds_is_skipped():
    assert gold_target("Inspections expire at the end of the month on the sticker.", PASSAGES) is None
    assert gold_target("", PASSAGES) is None
    assert gold_target("Renew your license online.", []) is None


def test_ties_go_to_the_better_ranked_passage():
    assert supporting_passage("renew license online", [PASSAGES[2], PASSAGES[1]]) == 0
