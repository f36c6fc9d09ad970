"""BM25 term weights."""

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

