"""Spell-correcting a searched question against the searched experts' documents (knowledge.services.correct_spelling)."""

from __future__ import annotations

import pytest

from experts.selectors import clear_serving_caches
from knowledge import services

pytestmark = pytest.mark.django_db


def test_a_question_is_corrected_against_the_searched_experts_words_only(kb, dmv, ssa, settings):
    services.ingest_files(dmv, [("renew.txt", b"Renew your driving licence online at the motor vehicles office.")], index=False)
    services.ingest_files(ssa, [("retire.txt", b"Apply for retirement benefits online with social security.")], index=False)

    fixed = services.correct_spelling([dmv], "how do I reneww my licnce")
    assert fixed.text == "how do I renew my licence"
    assert services.correct_spelling([dmv], "my retirment").text == "my retirment"  # not a DMV word
    assert services.correct_spelling([dmv, ssa], "my retirment").text == "my retirement"
    settings.RETRIEVAL_SPELLING = False
    assert not services.correct_spelling([dmv], "how do I reneww my licnce").changed


def test_new_documents_extend_the_vocabulary(kb, dmv):
    services.ingest_files(dmv, [("renew.txt", b"Renew your driving licence online.")], index=False)
    assert services.correct_spelling([dmv], "registraton").text == "registraton"
    services.ingest_files(dmv, [("plates.txt", b"Vehicle registration and plates.")], index=False)
    clear_serving_caches()  # other processes wait SERVING_CACHE_TTL_S for the change
    assert services.correct_spelling([dmv], "registraton").text == "registration"
