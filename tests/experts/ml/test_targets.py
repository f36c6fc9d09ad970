"""Gold answers as training targets: cited to the passage that holds them (as written, or as the passage sentence closest to them), or skipped."""

from __future__ import annotations

import pytest

from experts.ml.extractive import Passage
from experts.ml.targets import gold_target, sentence_target, supporting_passage, training_target

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


FAQ = [
    Passage("Renewals. You can renew online. Bring your old license to any office if you renew in person.", "Renewals"),
    Passage("Fees. A renewal costs $64.50 for eight years. Pay by card or check.", "Fees"),
]


def test_the_sentence_target_is_the_shown_sentence_closest_to_the_gold_answer_cited_as_select_writes_it():
    # The gold span runs over a sentence border and drops the full stop; the target is the passage's own sentence.
    assert sentence_target("A renewal costs $64.50 for eight years", FAQ) == "A renewal costs $64.50 for eight years. [2]"
    assert sentence_target("bring your old license to any office", FAQ, citation_format="(source {index})") == (
        "Bring your old license to any office if you renew in person. (source 1)")


def test_the_sentence_target_trains_on_the_same_questions_as_the_gold_answer():
    assert sentence_target("Inspections expire at the end of the month on the sticker.", FAQ) is None
    assert sentence_target("", FAQ) is None
    assert sentence_target("A renewal costs $64.50", []) is None


def test_training_target_dispatches_by_kind_and_refuses_an_unknown_one():
    answer = "Renew your driver license online up to a year before it expires."
    assert training_target("answer", answer, PASSAGES) == gold_target(answer, PASSAGES)
    assert training_target("sentence", answer, PASSAGES) == f"{answer} [2]"
    with pytest.raises(ValueError, match="unknown training target"):
        training_target("summary", answer, PASSAGES)


def test_an_unknown_lora_target_setting_fails_the_system_checks(settings):
    from experts.checks import lora_target_check

    settings.LORA_TARGET = "sentence"
    assert lora_target_check() == []
    settings.LORA_TARGET = "summary"
    assert [e.id for e in lora_target_check()] == ["experts.E003"]
