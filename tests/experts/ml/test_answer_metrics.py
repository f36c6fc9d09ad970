"""Answer metrics: SQuAD-normalised token F1, ROUGE-L, citations and abstentions, support of an answer by a passage."""

from __future__ import annotations

import pytest

from experts.ml.answer_metrics import is_abstention, normalize_answer, rouge_l, strip_citations, support, token_f1
from experts.ml.extractive import NOT_FOUND


def test_normalisation_drops_case_punctuation_and_articles():
    assert normalize_answer("The  Renewal fee is $64, an increase!") == "renewal fee is 64 increase"
    # An apostrophe parts words, as a hyphen does: the answer's "don't" is the reference's "don t" (doc2dial's extraction).
    assert normalize_answer("You don't need the child\u2019s form") == normalize_answer("You don t need the child s form")


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


def test_recall_is_the_share_of_the_references_content_words_the_answer_holds():
    from experts.ml.answer_metrics import content_recall

    reference = "Renew your licence online before it expires; the fee is 64 dollars."
    # Content words: renew, licence, online, expires, fee, 64, dollars (7); the short answer holds 3 of them.
    assert content_recall("Renew it online [1].", reference) == pytest.approx(2 / 7)
    assert content_recall("Renew your licence online. The fee is 64 dollars.", reference) == pytest.approx(6 / 7)
    assert content_recall(NOT_FOUND, reference) == 0.0
    assert content_recall("anything", "the of and") is None  # a reference of stop words alone scores nothing


def test_words_leave_out_citations_and_count_nothing_for_an_abstention():
    from experts.ml.answer_metrics import word_count

    assert word_count("Renew online [1]. Pay the fee [2].") == 5
    assert word_count(NOT_FOUND) == 0


def test_a_key_fact_is_held_when_all_its_content_words_are_in_the_answer():
    from experts.ml.answer_metrics import holds_fact

    assert holds_fact("The renewal fee is 64 dollars [1].", "64 dollars")
    assert holds_fact("Payments start at age 62.", "age 62")
    assert not holds_fact("Payments start at 65.", "age 62")
    assert not holds_fact("", "age 62")


@pytest.mark.parametrize("answer", [
    "Apply online https://studentaid.gov/apply www.ssa.gov/benefits https://va.gov/forms",
    "Benefits Eligibility Apply Now Contact Us Forms Publications Careers News Events About Us Help Center",
    "Home\nBenefits\nApply\nContact us\nForms",
    # The demo's retirement page's head, once quoted as the answer to "How do I apply for retirement benefits?"
    "Start your application today Apply Online For Retirement Benefits Jump to a topic on this page: Before You Apply / How To Apply / Once You've Applied",
    # A navigation menu quoted as an answer (issue 55): its items restart every few words.
    "Check your claim or appeal status View your payment history Upload evidence to support your claim",
])
def test_link_lists_menus_and_run_together_titles_are_junk(answer):
    from experts.ml.answer_metrics import is_junk

    assert is_junk(answer)


@pytest.mark.parametrize("answer", [
    "You can renew your licence online before it expires [1].",
    "Visit https://studentaid.gov to apply for a loan, then sign the promissory note.",
    "Bring these: your old plates, proof of address, and the fee.",
    # Rules the page never punctuated: a proper name and the list they introduce restart a title once or twice in 40 words.
    "To drive taxis and other livery vehicles in New York State, you must be 18 years of age or older and you must have a "
    "driver license that is one of these classes Class A commercial driver license CDL Class B CDL Class C CDL Class E driver license",
    "For the Post-9/11 GI Bill, we pay: Tuition and fees directly to the school Money for books to you at the beginning of the term "
    "Housing allowance to you at the end of each month",
    # Prose first, then the list it introduces, items running into each other: the list is the answer.
    "You: Served at Camp Lejeune for at least 30 cumulative days from August 1953 through December 1987, and you must have one of these "
    "conditions: Adult leukemia Aplastic anemia Bladder cancer Kidney cancer Liver cancer Multiple myeloma Parkinson's disease",
    NOT_FOUND,
])
def test_sentences_a_person_reads_are_not_junk(answer):
    from experts.ml.answer_metrics import is_junk

    assert not is_junk(answer)
