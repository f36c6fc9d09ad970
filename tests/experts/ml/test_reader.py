"""The reader re-orders the sentence scorer's shortlist, and the extractive answer does without it while it is absent."""

import numpy as np
import pytest

from evaluation.reader import Candidates, reader_figures
from experts.ml import extractive
from experts.ml.extractive import Passage, extractive_answer
from experts.ml.reader import ReaderGroup, SentenceReader, fit_reader, pick, wins_on_validation

PASSAGES = [
    Passage(text="You can renew your driver licence online. Renewal costs 64 dollars. Offices open at nine.", title="Renewals", score=0.7),
    Passage(text="Retirement benefits start at 62. You can apply online for retirement benefits.", title="Retirement", score=0.5),
]
QUESTION = "How much does licence renewal cost?"


def test_the_reader_re_orders_the_scorers_first_sentences(encoder, monkeypatch):
    monkeypatch.setattr(extractive, "READER_SHORTLIST", 5)
    seen: list[list[str]] = []

    def prefers_opening_hours(question, sentences):
        seen.append(list(sentences))
        return np.array([1.0 if "nine" in s else 0.0 for s in sentences])

    plain = extractive_answer(QUESTION, PASSAGES, encoder.encode)
    read = extractive_answer(QUESTION, PASSAGES, encoder.encode, reader=prefers_opening_hours)
    assert "64 dollars" in plain.text
    assert read.text.startswith("Offices open at nine.")
    assert seen[0][0] == "Renewal costs 64 dollars."  # the scorer's order, first choice first
    assert len(seen[0]) == min(extractive.READER_SHORTLIST, plain.selection["candidates"])
    assert read.selection["read"] == len(seen[0])
    assert plain.selection["read"] == 0


def test_a_sentence_outside_the_shortlist_is_never_chosen(encoder, monkeypatch):
    monkeypatch.setattr(extractive, "READER_SHORTLIST", 2)

    def prefers_the_last(question, sentences):
        return np.arange(len(sentences), dtype=float)

    ranked = extractive.rank_sentences(QUESTION, PASSAGES, encoder.encode)
    answer = extractive_answer(QUESTION, PASSAGES, encoder.encode, reader=prefers_the_last)
    assert answer.selection["quoted"][0]["text"] == ranked.sentences[1].text
    assert answer.selection["read"] == 2


def test_pick_takes_the_readers_best_within_the_shortlist_only():
    assert pick([4, 2, 7, 1], np.array([0.1, 0.9, 0.3, 5.0]), 3) == 2
    assert pick([4, 2, 7], np.array([0.1, 0.9, 0.3]), 1) == 4
    assert pick([4, 2, 7], None, 3) == 4


def test_reader_figures_count_the_pick_and_whether_it_is_the_best():
    items = [Candidates("q1", ["a", "b", "c"], np.array([0.2, 0.8, 0.0])), Candidates("q2", ["d", "e"], np.array([0.5, 0.1])),
             Candidates("q3", ["f", "g"], np.array([0.0, 0.0]))]
    second_first = reader_figures(items, lambda q, s: np.array([0.0, 1.0, 0.0][: len(s)]), shortlists=(1, 2))
    assert second_first["scorer"] == {"picked_f1": pytest.approx(0.2333, abs=1e-4), "pick_is_best": 0.5}
    assert second_first["reader"]["2"] == {"picked_f1": pytest.approx(0.3, abs=1e-4), "pick_is_best": 0.5}
    assert second_first["best_possible"] == pytest.approx(0.4333, abs=1e-4)
    assert "reader" not in reader_figures(items, None)


def test_the_extractive_generator_falls_back_to_the_scorer_while_there_is_no_reader(tmp_path, settings):
    from experts.generation import extractive as generator

    settings.VAR_DIR = tmp_path
    generator.sentence_reader.cache_clear()
    try:
        assert generator.sentence_reader() is None
    finally:
        generator.sentence_reader.cache_clear()
    with pytest.raises(FileNotFoundError):
        SentenceReader.load(tmp_path, "unused")


def test_a_reader_is_served_only_where_it_beats_the_scorer_on_validation():
    report = {"figures": {"val": {"scorer": {"picked_f1": 0.365, "pick_is_best": 0.37},
                                  "reader": {"2": {"picked_f1": 0.38, "pick_is_best": 0.39}, "3": {"picked_f1": 0.37, "pick_is_best": 0.37},
                                             "5": {"picked_f1": 0.24, "pick_is_best": 0.5}}},
                          "test": {"scorer": {"picked_f1": 0.1, "pick_is_best": 0.1}, "reader": {"4": {"picked_f1": 0.9, "pick_is_best": 0.9}}}}}
    assert wins_on_validation(report, 2)
    assert not wins_on_validation(report, 3)  # a better F1, but the pick is the best sentence no more often
    assert not wins_on_validation(report, 5)
    assert not wins_on_validation(report, 4)  # not measured on validation at that size
    assert not wins_on_validation({"fit": {}}, 2)


def test_a_fitted_reader_round_trips_through_its_saved_files(tmp_path):
    from encoders.model_files import DEFAULT_MODEL, resolve_model_path

    base = resolve_model_path(DEFAULT_MODEL)
    groups = [ReaderGroup("How much does renewal cost?", ["Renewal costs 64 dollars.", "Offices open at nine."], np.array([1.0, 0.0]))] * 2
    fitted = fit_reader(groups, base, questions_per_step=2, say=lambda _: None)
    fitted.save(tmp_path, {"test": True})
    loaded = SentenceReader.load(tmp_path, base, int8=False)
    sentences = ["Renewal costs 64 dollars.", "Offices open at nine."]
    assert loaded.report == {"test": True}
    assert np.allclose(loaded.rank_bias, fitted.rank_bias)
    assert fitted.rank_bias[0] > fitted.rank_bias[1]  # the first place was the right one here
    assert np.allclose(loaded.score(groups[0].question, sentences), fitted.score(groups[0].question, sentences), atol=0.02)  # float16 on disk
    with pytest.raises(ValueError, match="no question"):
        fit_reader([ReaderGroup("q", ["only one"], np.array([1.0]))], base)


def test_an_untrained_readers_scores_differ_between_pairs_and_ignore_padding():
    """The head reads the mean of the pair's token states: on the classification token (BERT's pooler) MiniLM gave every
    pair the same logit, and the first readers never learnt; the padding of a batch must not move a pair's score."""
    from encoders.model_files import DEFAULT_MODEL, resolve_model_path
    from experts.ml.reader import _cross_encoder

    encoder = _cross_encoder(resolve_model_path(DEFAULT_MODEL))
    reader = SentenceReader(encoder.model, encoder.tokenizer)
    sentences = ["Renewal costs 64 dollars.", "Offices open at nine.", "You can renew your driver licence online at any time of the day or night."]
    together = reader.score(QUESTION, sentences)
    alone = np.array([reader.score(QUESTION, [s])[0] for s in sentences])
    assert np.allclose(together, alone, atol=1e-5)
    assert np.ptp(together) > 1e-3
