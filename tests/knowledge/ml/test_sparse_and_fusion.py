"""BM25 term weights and reciprocal rank fusion."""

import pytest

from knowledge.ml.fusion import minmax, reciprocal_rank_fusion
from knowledge.ml.sparse import bm25_vector, term_index, tokenize


def test_tokenize_drops_stop_words_and_lowercases():
    assert tokenize("How do I renew MY Licence?") == ["renew", "licence"]


def test_term_frequency_saturates_and_long_documents_weigh_less():
    idx, one = bm25_vector("licence")
    _, three = bm25_vector("licence licence licence")
    assert idx == [term_index("licence")]
    assert one[0] < three[0] < 3 * one[0]
    _, long_doc = bm25_vector("licence " + "filler " * 500)
    assert long_doc[0] < one[0]


def test_query_vectors_are_binary():
    idx, values = bm25_vector("renew renew licence", query=True)
    assert len(idx) == 2
    assert values == [1.0, 1.0]


def test_rrf_rewards_items_ranked_high_in_several_lists():
    scores = reciprocal_rank_fusion([["a", "b", "c"], ["b", "a", "d"]], k=60)
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert max(scores, key=scores.get) in {"a", "b"}
    assert scores["d"] < scores["c"] or scores["d"] == pytest.approx(scores["c"])


def test_minmax_scales_to_unit_range():
    assert minmax([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert minmax([5.0, 5.0]) == [1.0, 1.0]
    assert minmax([]) == []
