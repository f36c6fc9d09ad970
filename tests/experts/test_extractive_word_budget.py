"""The extractive answer keeps within a request's ``max_tokens`` (words): a two-expert answer's parts are shorter (``serving.breadth.PART_WORDS``)."""

from __future__ import annotations

from experts.generation.base import GenerationRequest
from experts.generation.extractive import ExtractiveGenerator
from experts.ml.extractive import Passage

BEST = "You can renew your driver license online with MyDMV if it expired less than two years ago."
PASSAGE = Passage(text=f"{BEST} You need your license number and the last four digits of your Social Security number. "
                  "The renewal fee is 64 dollars for eight years.", title="Renewing your license", score=0.8, chunk_id="dmv-1")


def answer(max_tokens: int | None) -> str:
    request = GenerationRequest(question="How do I renew my driver license online?", expert="dmv", passages=[PASSAGE], max_tokens=max_tokens)
    return ExtractiveGenerator().generate(request).text


def test_without_a_budget_the_best_sentence_is_completed_and_within_one_it_stands_alone():
    whole = answer(None)
    assert whole.startswith(BEST)
    assert "last four digits" in whole
    short = answer(len(BEST.split()) + 3)
    assert short.startswith(BEST)
    assert "last four digits" not in short


def test_a_sentence_longer_than_the_budget_is_quoted_up_to_it():
    """An unpunctuated list reads as one "sentence"; its quote stops at the bound, marked as cut."""
    listed = Passage(text=(
        "You may qualify for education benefits if you: Served at least 36 months on active duty either all at once or with "
        "breaks in service, or Received a Purple Heart on or after September 11, 2001, and were honorably discharged after any "
        "amount of service, or Served for at least 30 continuous days all at once, without a break on or after September 11, "
        "2001, and were discharged after 60 days with a service-connected disability, or Are a dependent child using benefits "
        "transferred by a Veteran who has served for at least 36 months on active duty."), title="Post-9/11 GI Bill", score=0.8, chunk_id="va-1")
    request = GenerationRequest(question="How long do I need to have served for education benefits?", expert="va", passages=[listed], max_tokens=30)
    text = ExtractiveGenerator().generate(request).text
    assert text.startswith("You may qualify for education benefits if you: Served at least 36 months")
    assert text.endswith("... [1]")
    assert len(text.split()) == 30 + 2  # the bound's words, then "..." and the citation mark
    assert ExtractiveGenerator().generate(GenerationRequest(question=request.question, expert="va", passages=[listed])).text.count(" ") <= 61


def test_an_answer_the_requests_max_tokens_cut_short_finishes_for_length():
    """OpenAI's ``finish_reason``: "length" where the request's ``max_tokens`` cut the answer, "stop" where it ended."""
    def finish(max_tokens: int | None) -> str:
        request = GenerationRequest(question="How do I renew my driver license online?", expert="dmv", passages=[PASSAGE], max_tokens=max_tokens)
        return ExtractiveGenerator().generate(request).finish_reason

    assert finish(5) == "length"
    assert finish(len(BEST.split()) + 3) == "stop"  # the best sentence whole, the next ones left out: not cut
    assert finish(None) == "stop"


def test_a_links_label_never_completes_an_answer(monkeypatch):
    page = Passage(text=f"{BEST} The renewal fee is 64 dollars for eight years. Renewal and replacement forms",
                   title="Renewing your license", score=0.8, chunk_id="dmv-3")
    request = GenerationRequest(question="How do I renew my driver license online?", expert="dmv", passages=[page])
    text = ExtractiveGenerator().generate(request).text
    assert text.startswith(BEST)
    assert "64 dollars" in text
    assert "replacement forms" not in text
    monkeypatch.setattr("experts.ml.extractive.FRAGMENT_WORDS", 0)
    assert "replacement forms" in ExtractiveGenerator().generate(request).text  # the label would have been quoted


def test_a_sentence_the_answer_already_says_is_not_quoted_again(monkeypatch):
    """Pages restate a rule in two sections; the answer quotes it once (``extractive.NEAR_DUPLICATE``)."""
    again = "However, you must have US Department of Homeland Security DHS documentation that supports your legal status in this country."
    first = Passage(text="If you are not a US citizen, you must have US Department of Homeland Security DHS documentation that supports "
                    "your legal status in this country. The expiration date of that document is added to your license.", title="Non US citizens", score=0.8, chunk_id="dmv-4")
    second = Passage(text=f"{again} Bring the original documents to a DMV office.", title="Non US citizens — Documents", score=0.7, chunk_id="dmv-5")
    request = GenerationRequest(question="Can someone who is not a US citizen get a license?", expert="dmv", passages=[first, second])
    text = ExtractiveGenerator().generate(request).text
    assert text.count("legal status") == 1
    monkeypatch.setattr("experts.ml.extractive.NEAR_DUPLICATE", 1.01)  # no sentence counts as a repeat
    assert ExtractiveGenerator().generate(request).text.count("legal status") == 2
