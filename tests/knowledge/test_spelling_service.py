"""Spell-correcting a searched question against the searched experts' documents (knowledge.search.correct_spelling, knowledge.vocabulary.distinct_words)."""

from __future__ import annotations

import pytest

from experts.selectors import clear_serving_caches
from knowledge import ingest, search, vocabulary

pytestmark = pytest.mark.django_db


def test_a_question_is_corrected_against_the_searched_experts_words_only(kb, dmv, ssa, settings):
    ingest.ingest_files(dmv, [("renew.txt", b"Renew your driving licence online at the motor vehicles office.")], index=False)
    ingest.ingest_files(ssa, [("retire.txt", b"Apply for retirement benefits online with social security.")], index=False)

    fixed = search.correct_spelling([dmv], "how do I reneww my licnce")
    assert fixed.text == "how do I renew my licence"
    assert search.correct_spelling([dmv], "my retirment").text == "my retirment"  # not a DMV word
    assert search.correct_spelling([dmv, ssa], "my retirment").text == "my retirement"
    settings.RETRIEVAL_SPELLING = False
    assert not search.correct_spelling([dmv], "how do I reneww my licnce").changed


def test_new_documents_extend_the_vocabulary(kb, dmv):
    ingest.ingest_files(dmv, [("renew.txt", b"Renew your driving licence online.")], index=False)
    assert search.correct_spelling([dmv], "registraton").text == "registraton"
    ingest.ingest_files(dmv, [("plates.txt", b"Vehicle registration and plates.")], index=False)
    clear_serving_caches()  # other processes wait SERVING_CACHE_TTL_S for the change
    assert search.correct_spelling([dmv], "registraton").text == "registration"


def test_distinct_words_read_each_experts_documents_and_follow_their_changes(kb, dmv, ssa):
    ingest.ingest_files(dmv, [("renew.txt", b"Renew your licence with form MV44 at the office.")], index=False)
    ingest.ingest_files(ssa, [("retire.txt", b"Apply for retirement benefits online.")], index=False)
    words = vocabulary.distinct_words(["dmv", "ssa", "gone"])  # an expert that does not exist has no documents
    assert words.score("where do I send MV44?") > 0
    assert words.score("where do I send MV44?", exclude=0) == 0.0  # only the DMV's documents hold it
    assert words.score("what is SSDI?") == 0.0
    assert vocabulary.distinct_words(["dmv", "ssa", "gone"]) is words  # built once
    ingest.ingest_files(ssa, [("ssdi.txt", b"SSDI pays disability benefits.")], index=False)
    clear_serving_caches()
    assert vocabulary.distinct_words(["dmv", "ssa", "gone"]).score("what is SSDI?") > 0
