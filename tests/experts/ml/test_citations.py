"""A model's answer made safe to show: markers mapped to real passages, whole or streamed, stops, and unsupported answers."""

from __future__ import annotations

import pytest

from experts.ml.citations import UNSUPPORTED_NOTE, CitationStream, paragraph_ends_answer, parse_answer, said_not_found, support
from experts.ml.extractive import NOT_FOUND, Passage

PASSAGES = [
    Passage(text="Renew your registration online with your renewal notice.", title="Renew a registration", score=0.8, document_id=4),
    Passage(text="A safety inspection is required every 12 months at a licensed station.", title="Inspections", score=0.6, document_id=9),
]


def streamed(deltas, passages=PASSAGES, question="", **kwargs):
    stream = CitationStream(passages, **kwargs)
    shown = "".join(stream.feed(d) for d in deltas)
    tail, answer = stream.finish(question)
    return shown + tail, answer


def test_markers_are_renumbered_in_order_of_first_use_and_unknown_ones_dropped():
    answer = parse_answer("Get an inspection first. [2] Then renew online. [1] [7] Again [2].", PASSAGES)
    assert answer.text == "Get an inspection first. [1] Then renew online. [2] Again [1]."
    assert answer.citations == [PASSAGES[1], PASSAGES[0]]
    assert answer.grounded


def test_a_marker_split_across_deltas_is_held_back_and_renumbered_like_the_whole_answer():
    text, answer = streamed(["Get an inspection first. [", "2] Then renew", " online. [1", "] [7]"])
    assert text == "Get an inspection first. [1] Then renew online. [2] "
    assert answer.text == "Get an inspection first. [1] Then renew online. [2]"
    assert answer.citations == [PASSAGES[1], PASSAGES[0]]


@pytest.mark.parametrize("pieces", [["A safety inspection is required every 12 months. [2]"], list("A safety inspection is required every 12 months. [2]")])
def test_streaming_token_by_token_gives_the_same_answer_as_parsing_it_whole(pieces):
    text, answer = streamed(pieces)
    whole = parse_answer("".join(pieces), PASSAGES)
    assert text == whole.text == answer.text == "A safety inspection is required every 12 months. [1]"
    assert answer.citations == whole.citations == [PASSAGES[1]]


def test_an_answer_citing_nothing_cites_the_passages_it_draws_on_at_its_end():
    answer = parse_answer("You need a safety inspection every 12 months at a licensed station.", PASSAGES)
    assert answer.text == "You need a safety inspection every 12 months at a licensed station. [1]"
    assert answer.citations == [PASSAGES[1]]
    text, streamed_answer = streamed(["You need a safety inspection ", "every 12 months at a licensed station."])
    assert text == answer.text == streamed_answer.text


def test_figures_that_no_passage_has_make_an_answer_unsupported():
    answer = parse_answer("A passport photo costs $25.00 at the post office.", PASSAGES, question="How much is a passport photo?")
    assert answer.text == NOT_FOUND
    assert answer.grounded is False
    assert answer.citations == []


def test_an_answer_about_what_the_question_asked_and_no_passage_mentions_is_unsupported():
    question = "How do I renew a fishing license in Ohio?"
    checked = support("To renew a fishing license in Ohio, visit a fishing office in Ohio.", PASSAGES, question)
    assert checked.unsupported
    assert checked.foreign_terms == ["fishi", "ohio"]
    text, answer = streamed(["To renew a fishing license in Ohio, ", "visit a fishing office in Ohio."], question=question)
    assert text.endswith("\n\n" + UNSUPPORTED_NOTE)  # what was streamed cannot be taken back: it is flagged instead
    assert answer.grounded is False


def test_a_supported_answer_in_other_words_stays_grounded():
    checked = support("Inspections are needed every 12 months.", PASSAGES, "How often do I need an inspection?")
    assert not checked.unsupported
    assert checked.passages == [1]


@pytest.mark.parametrize("text", [NOT_FOUND, "The answer to the question is: \"I could not find this in the knowledge base.\"",
                                  "The reference material does not contain the answer.", "I don't know."])
def test_a_model_saying_it_found_nothing_is_ungrounded_in_the_platforms_words(text):
    assert said_not_found(text)
    answer = parse_answer(text, PASSAGES)
    assert answer.grounded is False
    assert answer.citations == []
    assert answer.text == NOT_FOUND


def test_an_empty_answer_is_not_found():
    assert parse_answer("   ", PASSAGES).text == NOT_FOUND
    text, answer = streamed([" ", "\n"])
    assert (text.strip(), answer.grounded) == (NOT_FOUND, False)


def test_the_answer_stops_at_its_first_paragraph_break_after_a_sentence_but_not_after_a_lead_in():
    text, answer = streamed(["The answer is:", "\n", "\nInspections happen every 12 months. [2]", "\n\nThe other answer is 66."],
                            stop_at_paragraph=True)
    assert text == "The answer is:\n\nInspections happen every 12 months. [1]"
    assert "66" not in answer.text
    assert paragraph_ends_answer("It is 62.")
    assert not paragraph_ends_answer("The answer to this question is:")


def test_an_imitated_reference_block_ends_the_answer_unshown():
    text, answer = streamed(["Renew online. [1]\n[passage 4] cite as [4] | Lost plates"], stops=["[passage", "<<<"])
    assert text == "Renew online. [1]"
    assert answer.citations == [PASSAGES[0]]


def test_another_citation_format_is_renumbered_too():
    answer = parse_answer("Renew online (source 2).", PASSAGES[::-1], citation_format="(source {index})")
    assert answer.text == "Renew online (source 1)."
    assert answer.citations == [PASSAGES[0]]


def test_an_answer_that_only_announces_itself_is_not_found():
    text = "The answer to this question is:\n\nThe answer to this question is:"
    assert parse_answer(text, PASSAGES).text == NOT_FOUND
    shown, answer = streamed([text])
    assert shown == f"{text}\n\n{NOT_FOUND}"
    assert answer.grounded is False
    assert parse_answer("The answer is: every 12 months.", PASSAGES).text.startswith("The answer is: every 12 months.")  # with its answer it stays
