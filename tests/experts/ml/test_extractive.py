"""The extractive answer picks relevant sentences, cites them, and admits when it found nothing."""

from experts.ml.extractive import NOT_FOUND, Passage, extractive_answer

PASSAGES = [
    Passage(text="You can renew your driver licence online. Renewal costs 64 dollars. Offices open at nine.", title="Renewals", score=0.7),
    Passage(text="Retirement benefits start at 62. You can apply online for retirement benefits.", title="Retirement", score=0.5),
]


def test_it_answers_from_the_best_sentences_with_citations(encoder):
    answer = extractive_answer("How much does licence renewal cost?", PASSAGES, encoder.encode, max_sentences=2)
    assert answer.grounded
    assert "64 dollars" in answer.text
    assert "[1]" in answer.text
    assert answer.citations[0].title == "Renewals"


def test_it_says_so_when_retrieval_is_weak(encoder):
    weak = [Passage(text=p.text, title=p.title, score=0.1) for p in PASSAGES]
    answer = extractive_answer("How much does licence renewal cost?", weak, encoder.encode, min_score=0.25)
    assert answer.text == NOT_FOUND
    assert not answer.grounded
    assert answer.citations == []


def test_it_handles_no_passages(encoder):
    assert extractive_answer("anything", [], encoder.encode).text == NOT_FOUND
