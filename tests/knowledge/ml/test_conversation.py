"""Searching with the conversation: the question's query widened with the user's earlier turns."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge.ml.conversation import SearchContext, expand_query
from knowledge.ml.sparse import bm25_vector


def _unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_without_a_context_the_question_is_searched_as_it_is():
    dense, indices, values = _unit([1.0, 0.0, 0.0]), *bm25_vector("renew licence", query=True)
    for context in (None, SearchContext(), SearchContext(turns=("my car",), weight=0.0), SearchContext(weight=1.0)):
        searched, i, v = expand_query(dense, indices, values, context)
        assert np.array_equal(searched, dense)
        assert (i, v) == (indices, values)


def test_the_dense_query_leans_towards_the_mean_of_the_earlier_turns():
    q = _unit([1.0, 0.0, 0.0])
    turns = np.stack([_unit([0.0, 1.0, 0.0]), _unit([0.0, 0.0, 1.0])])
    searched, _, _ = expand_query(q, [], [], SearchContext(vectors=turns, weight=0.5))
    expected = q + 0.5 * turns.mean(axis=0)
    assert searched == pytest.approx(expected / np.linalg.norm(expected))
    assert float(np.linalg.norm(searched)) == pytest.approx(1.0)
    assert float(searched @ q) > float(searched @ turns[0])  # below weight 1 the question stays the larger part
    with pytest.raises(ValueError, match="dimensions"):
        expand_query(q, [], [], SearchContext(vectors=np.ones((1, 4)), weight=0.5))


def test_the_turns_words_join_the_keyword_query_at_the_weight():
    indices, values = bm25_vector("how much does it cost", query=True)
    searched_i, searched_v = expand_query(_unit([1.0, 0.0]), indices, values, SearchContext(turns=("renew my licence", "licence online"), weight=0.75))[1:]
    weights = dict(zip(searched_i, searched_v, strict=True))
    for index in indices:
        assert weights[index] == pytest.approx(1.0 + (0.75 if index in bm25_vector("renew my licence licence online", query=True)[0] else 0.0))
    added = set(bm25_vector("renew my licence licence online", query=True)[0]) - set(indices)
    assert added
    assert all(weights[index] == pytest.approx(0.75) for index in added)
    assert searched_i == sorted(searched_i)


def test_words_alone_leave_the_dense_query_alone_and_bad_weights_are_refused():
    q = _unit([0.3, 0.7])
    searched, indices, _ = expand_query(q, [], [], SearchContext(turns=("veterans education",), weight=1.0))
    assert np.array_equal(searched, q)
    assert indices
    context = SearchContext(turns=("a", "b"), vectors=np.ones((3, 2)), weight=0.5)
    assert context.used_turns == 3
    assert not context.empty
    assert SearchContext(turns=("a",), weight=0.0).used_turns == 0
    for weight in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=">= 0"):
            SearchContext(turns=("a",), weight=weight)
