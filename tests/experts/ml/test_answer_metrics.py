"""Answer metrics: SQuAD-normalised token F1, ROUGE-L, citations and abstentions, support of an answer by a passage."""

from __future__ import annotations

import pytest

from experts.ml.answer_metrics import is_abstention, normalize_answer, rouge_l, strip_citations, support, token_f1
from experts.ml.extractive import NOT_FOUND


def test_normalisation_drops_case_punctuation_and_articles():
    assert normalize_answer("The  Renewal fee is $64, an increase!") == "renewal fee is 64 increase"


def test_token_f1_counts_shared_words_after_normalisation():
    assert token_f1("The licence, renewed online.", "licence renewed online") == 1.0
    # 2 of 4 predicted words are right, 2 of 2 gold words found: P 0.5, R 1.0.
    assert token_f1("renew licence online today", "renew online") == pytest.approx(2 / 3)
    assert token_f1("plates", "renew online") == 0.0


def test_citation_markers_are_not_words_of_the_answer():
    assert strip_citations("Renew online [1]. Pay the fee [ 2 ].") == "Renew online  . Pay the fee  ."
    assert strip_citations("Renew online (source 3).", "(source {index})") == "Renew online  ."
    assert token_f1("Renew online [1].", "renew online") == 1.0


def test_an_abstention_is_scored_as_the_empty_answer():
    assert is_abstention(NOT_FOUND)
    assert is_abstention("  ")
    assert not is_abstention("Renew online.")
    assert token_f1(NOT_FOUND, "renew online") == 0.0
    assert token_f1(NOT_FOUND, "") == 1.0
    assert rouge_l("", "") == 1.0


def test_rouge_l_is_the_f1_of_the_longest_common_subsequence():
    # LCS of "renew your licence online now" and "renew licence now online" is 3 words (renew licence now / online).
    assert rouge_l("renew your licence online now", "renew licence now online") == pytest.approx(2 * (3 / 5) * (3 / 4) / (3 / 5 + 3 / 4))
    assert rouge_l("online renew", "renew online") == pytest.approx(0.5)


def test_support_is_the_share_of_the_answer_found_in_the_passage():
    assert support("Renew it online.", "You can renew a licence online or by mail.") == pytest.approx(2 / 3)
    assert support("", "anything") == 1.0
