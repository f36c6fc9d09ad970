"""Spelling correction against the documents' words (knowledge.ml.spelling)."""

from __future__ import annotations

import pytest

from knowledge.ml import spelling
from knowledge.ml.spelling import Vocabulary, max_edits

DOCS = [
    "Renew your driver license online. A driver license renewal needs a vision test.",
    "Register your vehicle and keep the registration card in the car. Lost registration? Order a replacement.",
    "Insurance must stay active while the vehicle is registered.",
]


@pytest.fixture
def vocabulary():
    return Vocabulary.from_texts(DOCS)


def test_misspelt_words_become_the_documents_words(vocabulary):
    fixed = vocabulary.correct("how do i renw my drivr licnse")
    assert fixed.text == "how do i renew my driver license"
    assert fixed.changes == [("renw", "renew"), ("drivr", "driver"), ("licnse", "license")]
    assert fixed.changed


def test_a_swap_of_two_letters_counts_as_one_edit(vocabulary):
    assert vocabulary.correct("lost regsitration card").text == "lost registration card"
    assert vocabulary.correct("my insurnace").text == "my insurance"


def test_known_short_and_dictionary_words_are_left_alone(vocabulary):
    question = "Please help with the car, 2024 model"
    fixed = vocabulary.correct(question, dictionary={"please", "help", "model"})
    assert fixed.text == question
    assert not fixed.changed


def test_a_word_too_far_from_every_document_word_stays_as_written(vocabulary):
    fixed = vocabulary.correct("quantum chromodynamics")
    assert fixed.text == "quantum chromodynamics"


def test_ties_go_to_the_more_frequent_word():
    vocabulary = Vocabulary.from_texts(["cart cart cart", "card"])
    assert vocabulary.closest("carx") == "cart"


def test_edit_budget_grows_with_word_length():
    assert max_edits("card") == 1
    assert max_edits("licence") == 2


def test_empty_emoji_and_huge_questions_are_handled(vocabulary):
    assert vocabulary.correct("").text == ""
    assert vocabulary.correct("🚗🚗").text == "🚗🚗"
    long = "renw " * 2000
    assert vocabulary.correct(long).text.count("renew") == 2000


def test_a_wall_of_unknown_words_is_searched_a_bounded_number_of_times(vocabulary, monkeypatch):
    from knowledge.ml import spelling

    calls = []
    real = Vocabulary.closest
    monkeypatch.setattr(Vocabulary, "closest", lambda self, word: calls.append(word) or real(self, word))
    words = " ".join("zz" + "".join(chr(97 + int(d)) for d in f"{i:03d}") for i in range(100))  # 100 distinct unknown words
    vocabulary.correct(words + " renw renw")
    assert len(calls) == spelling.MAX_LOOKUPS


def test_the_documents_words_count_as_written_or_misspelt_and_any_alphabets_words_count(vocabulary):
    assert vocabulary.known_words("how do i renw my drivr licnse") == (3, 7)  # renew, driver, license: "how do i my" are no document's
    assert vocabulary.known_words("Registration: 42 vehicles!") == (2, 2)  # vehicles is one edit from vehicle; numbers are no words
    assert vocabulary.known_words("Führerschein erneuern") == (0, 2)
    assert vocabulary.known_words("驾照") == (0, 2)  # a character of a script without spaces is a word
    assert vocabulary.known_words("?") == (0, 0)


@pytest.mark.parametrize(("documents", "question", "shared"), [
    (DOCS, "Renew your driver licnse online", True),
    (DOCS, "Renew the license, Smithers", True),  # one unknown word: a name
    (DOCS, "Wie erneuere ich meinen Führerschein online?", False),
    (DOCS, "如何在线更新驾照", False),
    (["Sie können Ihren Führerschein online erneuern."], "Wie erneuere ich meinen Führerschein online?", False),  # one sentence: too few words
    (["Wie erneuere ich meinen Führerschein? Sie können Ihren Führerschein online erneuern."], "Kann ich meinen Führerschein online erneuern?", True),
    (["您可以在线更新驾照。"], "如何在线更新驾照", True),
    (DOCS, "", True),
])
def test_a_question_shares_its_documents_language_when_most_of_its_words_are_theirs(monkeypatch, documents, question, shared):
    monkeypatch.setattr(spelling, "VOCABULARY_MIN", 0)  # these documents are far fewer than a collection that knows its language
    assert Vocabulary.from_texts(documents).shares_language(question) is shared


def test_documents_of_too_few_words_to_know_their_language_refuse_no_question(vocabulary):
    assert len(vocabulary) < spelling.VOCABULARY_MIN
    assert vocabulary.shares_language("Wie erneuere ich meinen Führerschein online?")
