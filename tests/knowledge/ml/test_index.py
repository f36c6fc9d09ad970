"""The in-memory hybrid index: exact dense search, BM25 with Qdrant's IDF, RRF fusion, several indexes as one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from knowledge.ml.index import HybridIndex, bm25_idf, rrf_score, search_indexes
from knowledge.ml.sparse import bm25_vector


def unit(*axes: int, dim: int = 8) -> list[float]:
    v = np.zeros(dim, dtype=np.float32)
    v[list(axes)] = 1.0
    return (v / np.linalg.norm(v)).tolist()


def build(rows: list[tuple[str, list[float], str]]) -> HybridIndex:
    sparse = [bm25_vector(text) for _, _, text in rows]
    return HybridIndex.from_points([r[0] for r in rows], [r[1] for r in rows], [s[0] for s in sparse], [s[1] for s in sparse],
                                   [{"text": r[2]} for r in rows])


@pytest.fixture
def index() -> HybridIndex:
    return build([
        ("a", unit(0), "renew your driving licence online"),
        ("b", unit(1), "replace a lost licence"),
        ("c", unit(2), "retirement benefits and pensions"),
        ("d", unit(0, 1), "licence fees and payment"),
    ])


def test_dense_search_ranks_by_cosine(index):
    hits = index.search(unit(0), [], [], limit=2, method="dense")

    assert [index.ids[h.row] for h in hits] == ["a", "d"]
    assert hits[0].dense_score == pytest.approx(1.0)
    assert hits[1].dense_score == pytest.approx(math.sqrt(0.5))


def test_sparse_search_uses_qdrant_idf(index):
    idx, val = bm25_vector("retirement licence", query=True)
    scores, matched = index.sparse_scores(idx, val)

    # "licence" is in 3 of 4 rows, "retirement" in 1: the rare word weighs more.
    assert bm25_idf(np.array([1]), 4)[0] == pytest.approx(math.log((4 - 1 + 0.5) / (1 + 0.5) + 1))
    assert sorted(index.ids[r] for r in matched) == ["a", "b", "c", "d"]
    assert index.ids[int(np.argmax(scores))] == "c"
    assert index.search(unit(5), *bm25_vector("pensions", query=True), limit=5, method="sparse")[0].row == 2


def test_a_query_with_unknown_words_finds_nothing_sparse(index):
    assert index.search(unit(0), *bm25_vector("zebra", query=True), limit=5, method="sparse") == []


def test_hybrid_fuses_both_lists_with_rrf(index):
    idx, val = bm25_vector("lost licence", query=True)
    hits = index.search(unit(1), idx, val, limit=3)

    assert index.ids[hits[0].row] == "b"  # first in both lists
    assert hits[0].score == pytest.approx(2 * rrf_score(0))
    assert all(h.dense_score >= -1 for h in hits)


def test_save_and_load_round_trip(index, tmp_path):
    index.save(tmp_path / "ix")
    loaded = HybridIndex.load(tmp_path / "ix")

    idx, val = bm25_vector("licence fees", query=True)
    assert loaded.ids == index.ids
    assert loaded.payloads == index.payloads
    assert [(h.row, round(h.score, 6)) for h in loaded.search(unit(0), idx, val)] == [(h.row, round(h.score, 6)) for h in index.search(unit(0), idx, val)]


def test_an_incomplete_saved_index_is_reported_missing(index, tmp_path):
    index.save(tmp_path / "ix")
    (tmp_path / "ix" / "meta.json").unlink()

    with pytest.raises(FileNotFoundError):
        HybridIndex.load(tmp_path / "ix")


def test_several_indexes_searched_with_equal_weights_equal_one_merged_index():
    first = build([("a", unit(0), "renew licence online"), ("b", unit(1), "lost licence")])
    second = build([("c", unit(2), "retirement benefits"), ("d", unit(0, 2), "licence for retirees")])
    merged = HybridIndex.concat([first, second])
    idx, val = bm25_vector("licence retirement", query=True)

    split = search_indexes([first, second], unit(0), idx, val, limit=4)
    together = merged.search(unit(0), idx, val, limit=4)

    assert [([first, second][h.index].ids[h.row], round(h.score, 6)) for h in split] == [(merged.ids[h.row], round(h.score, 6)) for h in together]


def test_weights_scale_each_index_and_zero_skips_it():
    first = build([("a", unit(0), "renew licence online")])
    second = build([("b", unit(0), "renew licence online")])
    idx, val = bm25_vector("renew licence", query=True)

    favoured = search_indexes([first, second], unit(0), idx, val, limit=2, weights=[0.2, 0.8])
    skipped = search_indexes([first, second], unit(0), idx, val, limit=2, weights=[1.0, 0.0])

    # Equal chunks: the first index's ranks 1st in both lists (ties by position), yet the weight puts the second first.
    assert [h.index for h in favoured] == [1, 0]
    assert favoured[0].score == pytest.approx(0.8 * 2 * rrf_score(1))
    assert favoured[1].score == pytest.approx(0.2 * 2 * rrf_score(0))
    assert [h.index for h in skipped] == [0]


def test_an_empty_index_answers_nothing():
    empty = HybridIndex.from_points([], [], [], [], [], dimension=8)

    assert empty.search(unit(0), *bm25_vector("x", query=True)) == []
    assert search_indexes([empty], unit(0), [], []) == []


def test_best_scores_are_the_best_dense_and_sparse_scores_of_any_row():
    from knowledge.ml.sparse import bm25_vector

    rng = np.random.default_rng(3)
    texts = ["renew licence online", "vision test rules for a licence", "retirement benefits", "licence licence fees", "nothing here"]
    vectors = rng.normal(size=(len(texts), 6)).astype(np.float32)
    sparse = [bm25_vector(t) for t in texts]
    index = HybridIndex.from_points([str(i) for i in range(len(texts))], vectors, [s[0] for s in sparse], [s[1] for s in sparse], [{}] * len(texts))
    for question in ("licence fees", "retirement", "unknown words only", ""):
        q = rng.normal(size=6).astype(np.float32)
        idx, val = bm25_vector(question, query=True)
        dense, keywords = index.best_scores(q, idx, val)
        scores, matched = index.sparse_scores(idx, val)
        assert dense == pytest.approx(float(index.dense_scores(q).max()), abs=1e-6)
        assert keywords == pytest.approx(float(scores[matched].max()) if matched.size else 0.0, rel=1e-5)
    empty = HybridIndex.from_points([], [], [], [], [], dimension=6)
    assert empty.best_scores(np.ones(6), [1], [1.0]) == (0.0, 0.0)
