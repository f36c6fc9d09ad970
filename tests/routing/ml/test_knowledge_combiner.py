"""Knowledge-aware routing's combiner (routing.ml.knowledge): fitting, the keep-or-drop rule, the in-scope score, saving."""

from __future__ import annotations

import numpy as np
import pytest

from routing.ml.knowledge import (
    FILE,
    FIT_CANDIDATES,
    ROUTER_ALONE,
    KnowledgeCombiner,
    MissingKnowledge,
    candidate_rows,
    evidence_matrix,
    evidence_one,
)


def questions(n=400, n_experts=4, router_margin=1.0, evidence=True, seed=0):
    """Router probabilities that favour the gold expert by ``router_margin``, and evidence that does (or, off, is noise)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_experts, n)
    logits = rng.normal(size=(n, n_experts))
    logits[np.arange(n), y] += router_margin
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    dense = rng.normal(0.4, 0.05, (n, n_experts))
    keywords = rng.uniform(0, 5, (n, n_experts))
    if evidence:
        dense[np.arange(n), y] += 0.1
        keywords[np.arange(n), y] += 3
    score = rng.normal(0.6, 0.1, n)
    return probs, score, dense, keywords, y


def test_evidence_that_tells_the_experts_apart_is_kept_and_fixes_routing():
    probs, score, dense, keywords, y = questions()
    combiner = KnowledgeCombiner.fit(probs, score, dense, keywords, y)
    assert combiner.active
    assert combiner.report["kept"]
    assert combiner.report["val_accuracy_cv"] > combiner.report["val_accuracy_router"] + 0.1
    test = questions(seed=1)
    combined, _ = combiner.combine(*test[:4])
    assert (combined.argmax(axis=1) == test[4]).mean() > (test[0].argmax(axis=1) == test[4]).mean() + 0.1


def test_evidence_that_is_noise_is_dropped_on_validation():
    probs, score, dense, keywords, y = questions(router_margin=3.0, evidence=False)
    combiner = KnowledgeCombiner.fit(probs, score, dense, keywords, y)
    assert not combiner.report["kept"]
    assert not combiner.active
    assert combiner.weights.tolist() == list(ROUTER_ALONE)
    combined, _ = combiner.combine(probs, score, dense, keywords)
    assert np.allclose(combined, probs)  # the router alone, exactly


def test_combining_moves_probability_only_between_the_candidates():
    probs, score, dense, keywords, y = questions(n_experts=6)
    combiner = KnowledgeCombiner.fit(probs, score, dense, keywords, y)
    combined, _ = combiner.combine(probs, score, dense, keywords)
    assert np.allclose(combined.sum(axis=1), 1.0)
    candidates = candidate_rows(probs, combiner.candidates)
    others = np.ones_like(probs, dtype=bool)
    others[np.arange(len(probs))[:, None], candidates] = False
    assert np.allclose(combined[others], probs[others])


def test_a_strong_match_in_one_collection_raises_the_in_scope_score():
    probs, score, dense, keywords, y = questions()
    combiner = KnowledgeCombiner.fit(probs, score, dense, keywords, y)
    assert combiner.score_scale > 0
    one = probs[:1]
    low = np.array([0.2])
    matched, unmatched = dense[:1].copy(), dense[:1].copy()
    matched[0, one.argmax()] = 0.9
    unmatched[:] = 0.05
    assert combiner.combine(one, low, matched, keywords[:1])[1][0] > combiner.combine(one, low, unmatched, keywords[:1])[1][0]


def test_it_refuses_experts_without_documents_and_names_them():
    probs, score, dense, keywords, y = questions()
    dense[:, 2] = np.nan
    keywords[:, 2] = np.nan
    with pytest.raises(MissingKnowledge, match="names-2") as caught:
        KnowledgeCombiner.fit(probs, score, dense, keywords, y, experts=["names-0", "names-1", "names-2", "names-3"])
    assert caught.value.experts == ["names-2"]


def test_mismatched_shapes_are_refused():
    probs, score, dense, keywords, y = questions()
    with pytest.raises(ValueError, match="same questions"):
        KnowledgeCombiner.fit(probs, score, dense[:, :2], keywords, y)


def test_it_saves_and_loads_and_ignores_a_file_with_other_features(tmp_path):
    probs, score, dense, keywords, y = questions()
    combiner = KnowledgeCombiner.fit(probs, score, dense, keywords, y)
    combiner.save(tmp_path)
    loaded = KnowledgeCombiner.load(tmp_path)
    assert np.allclose(loaded.weights, combiner.weights)
    assert loaded.score_scale == pytest.approx(combiner.score_scale)
    assert np.allclose(loaded.combine(probs, score, dense, keywords)[0], combiner.combine(probs, score, dense, keywords)[0])
    assert KnowledgeCombiner.load(tmp_path / "nowhere") is None
    text = (tmp_path / FILE).read_text().replace("keyword_share", "something_else")
    (tmp_path / FILE).write_text(text)
    assert KnowledgeCombiner.load(tmp_path) is None


def test_evidence_matrix_asks_only_for_each_questions_candidates():
    probs = np.array([[0.7, 0.2, 0.06, 0.04], [0.1, 0.1, 0.1, 0.7]])
    asked = []

    def lookup(positions, vector, text):
        asked.append((tuple(positions), text))
        return [None if p == 3 else (0.1 * p, float(p)) for p in positions]

    dense, keywords = evidence_matrix(lookup, probs, np.zeros((2, 3)), ["a", "b"], k=2)
    assert asked == [((0, 1), "a"), ((3, 0), "b")]
    assert dense[0, 1] == pytest.approx(0.1)
    assert keywords[0, 1] == 1.0
    assert np.isnan(dense[0, 2])
    assert np.isnan(dense[1, 3])


def test_the_cosine_weighs_in_the_in_scope_score_only_where_it_tells_an_unknown_experts_questions_apart():
    probs, score, dense, keywords, y = questions(seed=5)
    rng = np.random.default_rng(6)
    # The router's score drops for a question whose expert is gone; the best cosine does not (every
    # collection matches every question as well): adding it can only blur the router's score.
    held_out = score - 0.3 + rng.normal(0, 0.02, len(y))
    flat = rng.normal(0.5, 0.05, dense.shape)
    blurred = KnowledgeCombiner.fit(probs, score, flat, keywords, y, held_out_score=held_out)
    assert blurred.score_scale == 0.0
    assert [t["factor"] for t in blurred.report["score_scale_tried"]] == [0.0, 0.25, 0.5, 1.0]
    # The router's score says nothing of it; the gold collection's cosine does.
    telling = dense.copy()
    telling[np.arange(len(y)), y] += 0.3
    kept = KnowledgeCombiner.fit(probs, score, telling, keywords, y, held_out_score=score + rng.normal(0, 0.01, len(y)))
    assert kept.score_scale > 0
    # Without held-out scores: the earlier rule, the full spreads' ratio.
    assert KnowledgeCombiner.fit(probs, score, flat, keywords, y).score_scale > 0
    with pytest.raises(ValueError, match="same questions"):
        KnowledgeCombiner.fit(probs, score, flat, keywords, y, held_out_score=score[:10])


def test_one_question_at_a_time_gives_the_batch_figures():
    """Serving's one-row path (``evidence_one`` + ``combine_one``) equals ``evidence_matrix`` + ``combine``, missing collections included."""
    probs, score, dense, keywords, y = questions(n=300, n_experts=5)
    combiner = KnowledgeCombiner.fit(probs, score, dense, keywords, y)
    assert combiner.active
    dense[::7, 2] = np.nan  # some collections missing or empty

    def lookup_of(i):
        return lambda positions, vector, text: [None if np.isnan(dense[i, p]) else (dense[i, p], keywords[i, p]) for p in positions]

    for i in range(0, 300, 3):
        d, k = evidence_matrix(lookup_of(i), probs[i : i + 1], np.zeros((1, 2)), ["q"], combiner.candidates)
        batch, batch_score = combiner.combine(probs[i : i + 1], score[i : i + 1], d, k)
        cand, d1, k1 = evidence_one(lookup_of(i), probs[i], np.zeros(2), "q", combiner.candidates)
        assert cand == candidate_rows(probs[i : i + 1], combiner.candidates)[0].tolist()
        one, one_score = combiner.combine_one(probs[i], float(score[i]), cand, d1, k1)
        np.testing.assert_allclose(one, batch[0], rtol=1e-9, atol=1e-12)
        assert one_score == pytest.approx(float(batch_score[0]), abs=1e-12)


def test_one_question_without_any_keyword_match_shares_nothing():
    combiner = KnowledgeCombiner(np.array([1.0, 2.0, 3.0]), 0.5)
    probs = np.array([0.5, 0.3, 0.2])
    one, score = combiner.combine_one(probs, 0.4, [0, 1, 2], np.array([0.2, np.nan, 0.6]), np.zeros(3))
    batch, batch_score = combiner.combine(probs[None, :], np.array([0.4]), np.array([[0.2, np.nan, 0.6]]), np.zeros((1, 3)))
    np.testing.assert_allclose(one, batch[0])
    assert score == pytest.approx(0.4 + 0.5 * 0.6)
    assert batch_score[0] == pytest.approx(score)



def test_a_held_out_question_is_compared_over_as_many_collections_as_served():
    """Evidence that is noise must not seem to tell an unknown expert's questions apart.

    Served, a question's best cosine is the best of its three candidates; were its expert gone, the
    router would offer three others. Looked up for three candidates only, the held-out best would be
    the best of two, lower on average whatever the evidence means.
    """
    probs, score, dense, keywords, y = questions(n=2000, seed=11)
    rng = np.random.default_rng(12)
    noise = rng.normal(0.5, 0.1, dense.shape)
    held_out = score + rng.normal(0, 0.01, len(y))
    wide = KnowledgeCombiner.fit(probs, score, noise, keywords, y, held_out_score=held_out)
    assert all(abs(t["auroc"] - 0.5) < 0.01 for t in wide.report["score_scale_tried"])
    served_only = noise.copy()
    unasked = np.ones_like(noise, dtype=bool)
    unasked[np.arange(len(y))[:, None], candidate_rows(probs, 3)] = False
    served_only[unasked] = np.nan
    narrow = KnowledgeCombiner.fit(probs, score, served_only, keywords, y, held_out_score=held_out)
    assert narrow.report["score_scale_tried"][-1]["auroc"] > 0.55  # the bias FIT_CANDIDATES removes
    assert FIT_CANDIDATES == 4


def test_the_cosine_can_take_part_in_abstention_where_it_does_not_rank():
    combiner = KnowledgeCombiner(np.asarray(ROUTER_ALONE), score_scale=0.5)
    assert not combiner.active
    assert combiner.in_scope
    assert combiner.serves
    probs = np.array([0.5, 0.3, 0.2])
    one, one_score = combiner.combine_one(probs, 0.4, [0, 1, 2], np.array([0.2, 0.6, np.nan]), np.array([1.0, 2.0, np.nan]))
    np.testing.assert_allclose(one, probs)  # the router's ranking, exactly
    assert one_score == pytest.approx(0.4 + 0.5 * 0.6)
    assert not KnowledgeCombiner(np.asarray(ROUTER_ALONE), score_scale=0.0).serves


def test_distinct_words_weigh_in_the_in_scope_score_where_validation_says_they_tell_unknown_experts_apart():
    probs, score, dense, keywords, y = questions(seed=21)
    rng = np.random.default_rng(22)
    held_out = score + rng.normal(0, 0.01, len(y))  # the router's score tells nothing
    flat = rng.normal(0.5, 0.05, dense.shape)
    # Half the questions carry a word of their own expert's documents, which is gone when it is held out.
    words = np.where(rng.random(len(y)) < 0.5, 8.0, 0.0)
    combiner = KnowledgeCombiner.fit(probs, score, flat, keywords, y, held_out_score=held_out, words=words, held_out_words=np.zeros_like(words))
    assert combiner.word_scale > 0
    assert combiner.in_scope
    assert combiner.serves
    assert [t["factor"] for t in combiner.report["word_scale_tried"]] == [0.0, 0.25, 0.5, 1.0]
    _, scored = combiner.combine(probs, score, flat, keywords, words)
    _, without = combiner.combine(probs, score, flat, keywords)
    assert (scored[words > 0] > without[words > 0]).all()
    assert np.allclose(scored[words == 0], without[words == 0])
    cand = candidate_rows(probs[:1], combiner.candidates)[0].tolist()
    _, one = combiner.combine_one(probs[0], float(score[0]), cand, flat[0, cand], keywords[0, cand], float(words[0]))
    assert one == pytest.approx(float(scored[0]))
    # Words held out as present as served tell nothing: no weight.
    assert KnowledgeCombiner.fit(probs, score, flat, keywords, y, held_out_score=score - 0.3, words=words, held_out_words=words).word_scale == 0.0


def test_the_word_weight_is_saved_and_older_files_read_as_none(tmp_path):
    import json

    KnowledgeCombiner(np.asarray(ROUTER_ALONE), score_scale=0.0, word_scale=0.3).save(tmp_path)
    assert KnowledgeCombiner.load(tmp_path).word_scale == pytest.approx(0.3)
    saved = json.loads((tmp_path / FILE).read_text())
    del saved["word_scale"]
    (tmp_path / FILE).write_text(json.dumps(saved))
    assert KnowledgeCombiner.load(tmp_path).word_scale == 0.0
