from knowledge.ml.sparse import bm25_vector


def test_a_query_weighs_each_distinct_word_once_without_stop_words():
    indices, values = bm25_vector("How do I renew MY licence, my licence?", query=True)
    assert len(indices) == 2  # "renew" and "licence"; the rest are stop words
    assert values == [1.0, 1.0]


def test_words_are_not_stemmed_and_case_does_not_matter():
    # Validation preferred no stemming (knowledge.ml.sparse); the dense search and spelling mending carry word forms.
    assert bm25_vector("licences renewed", query=True)[0] != bm25_vector("licence renew", query=True)[0]
    assert bm25_vector("Licence RENEW", query=True)[0] == bm25_vector("licence renew", query=True)[0]


def test_a_documents_term_weight_saturates_and_falls_with_its_length():
    _, one = bm25_vector("licence")
    _, three = bm25_vector("licence licence licence")
    _, diluted = bm25_vector("licence " + " ".join(f"filler{i}" for i in range(500)))
    assert one[0] < three[0] < 3 * one[0]
    assert max(diluted) < one[0]
