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
