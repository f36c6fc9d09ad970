"""Words that belong to one expert's documents (knowledge.ml.distinct): jargon keeps a question in scope, everyday words do not."""

from __future__ import annotations

import pytest

from knowledge.ml.distinct import DistinctWords

DOCS = [
    ["Public Service Loan Forgiveness (PSLF) forgives your loans. Apply for PSLF with the PSLF form.", "Repay your loans on time."],
    ["Renew your driver license online. Tell the DMV about me and my car."] * 3,
    ["Retirement benefits start at 62. SSI pays monthly."],
]
KNOWN = frozenset("what is a the me tell joke renew your driver license online about and my car how do i".split())


def test_a_rare_word_of_one_experts_documents_scores_high_and_everyday_words_do_not():
    words = DistinctWords.from_texts(DOCS, KNOWN)
    assert words.score("what is PSLF?") > 1.0
    assert words.score("tell me a joke") == 0.0  # "me" and "tell" are rare in the documents, but everyday words
    assert words.score("what is the weather?") == 0.0  # not in any document
    assert words.score("") == 0.0
    # Without the everyday vocabulary, "me" (one expert's pages only) would pass for jargon.
    assert DistinctWords.from_texts(DOCS).score("tell me a joke") > 0


def test_a_word_shared_by_experts_counts_less_than_one_that_belongs_to_one():
    docs = [["alpha gamma beta"], ["gamma beta"], ["delta"]]
    words = DistinctWords.from_texts(docs)
    assert words.score("alpha") > words.score("gamma")
    assert words.score("gamma") == pytest.approx(words.score("beta"))


def test_held_out_an_expert_its_own_words_tell_nothing():
    words = DistinctWords.from_texts(DOCS, KNOWN)
    assert words.score("what is PSLF?", exclude=0) == 0.0  # only the held-out expert's documents had it
    assert words.score("what is SSI?", exclude=0) > 0
    assert list(words.scores(["PSLF", "SSI"], exclude=[0, 2])) == [0.0, 0.0]


def test_the_strongest_claim_names_the_word_and_the_expert_whose_documents_use_it():
    words = DistinctWords.from_texts(DOCS, KNOWN)
    assert words.strongest("what is PSLF?")[:2] == ("pslf", 0)
    word, expert, value = words.strongest("what is PSLF or SSI?")
    assert (word, expert) in {("pslf", 0), ("ssi", 2)}
    assert value == pytest.approx(words.score("what is PSLF or SSI?")) == pytest.approx(max(words.score("PSLF"), words.score("SSI")))
    assert words.strongest("what is PSLF or SSI?", exclude=0)[:2] == ("ssi", 2)
    assert words.strongest("tell me a joke") is None
