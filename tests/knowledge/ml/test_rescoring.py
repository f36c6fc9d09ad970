"""Re-scoring retrieved chunks by their best sentence: it promotes the chunk holding the answer, and 0 changes nothing."""

import numpy as np
import pytest

from knowledge.ml.rescoring import best_sentence_scores, rerank, rescore

Q = np.array([1.0, 0.0, 0.0], dtype=np.float32)
ON_TOPIC = np.array([[0.0, 1.0, 0.0], [0.6, 0.8, 0.0]], dtype=np.float32)  # about the topic, no answer (best 0.6)
ANSWER = np.array([[0.0, 0.0, 1.0], [0.95, 0.0, 0.3122]], dtype=np.float32)  # one sentence answers (0.95)


def test_a_chunk_whose_sentence_answers_moves_up():
    assert rerank(Q, [0.5, 0.45], [ON_TOPIC, ANSWER], weight=0.5) == [1, 0]


def test_weight_zero_keeps_the_retrieval_order():
    assert rerank(Q, [0.5, 0.45], [ON_TOPIC, ANSWER], weight=0.0) == [0, 1]
    assert rescore(Q, [0.5, 0.25], [ON_TOPIC, ANSWER], weight=0.0).tolist() == [1.0, 0.5]


def test_the_mix_is_the_scaled_retrieval_score_and_the_best_sentence():
    mixed = rescore(Q, [0.5, 0.25], [ON_TOPIC, ANSWER], weight=0.25)

    assert mixed == pytest.approx([0.75 * 1.0 + 0.25 * 0.6, 0.75 * 0.5 + 0.25 * 0.95], abs=1e-5)


def test_a_chunk_without_sentence_vectors_counts_its_fallback():
    assert best_sentence_scores(Q, [None, ANSWER, np.zeros((0, 3))], fallback=[0.3, 0.0, 0.2]) == pytest.approx([0.3, 0.95, 0.2], abs=1e-5)


def test_vectors_of_another_dimension_are_ignored():
    assert best_sentence_scores(Q, [np.ones((2, 5), dtype=np.float32)], fallback=[0.4]) == pytest.approx([0.4])


def test_no_candidates_and_bad_weights():
    assert rerank(Q, [], [], weight=0.5) == []
    with pytest.raises(ValueError, match="between 0 and 1"):
        rescore(Q, [1.0], [None], weight=1.5)
