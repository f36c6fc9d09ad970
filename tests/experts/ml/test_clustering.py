"""Sparse DBSCAN, the eps suggestion and topic grouping on synthetic data with known structure."""

import numpy as np
import pytest
from sklearn.cluster import DBSCAN
from sklearn.metrics import adjusted_rand_score

from experts.ml.clustering import SparseDBSCAN, describe_groups, group_topics, radius_graph, suggest_eps


def blobs_on_sphere(n_per=150, centers=6, dim=32, spread=0.08, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(centers, dim))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    x = np.concatenate([c[i] + spread * rng.normal(size=(n_per, dim)) for i in range(centers)])
    y = np.repeat(np.arange(centers), n_per)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), y


def test_it_matches_sklearn_dbscan_exactly():
    x, _ = blobs_on_sphere(n_per=60, centers=4)
    ours = SparseDBSCAN(eps=0.2, min_samples=5, block=37).fit(x).labels_
    reference = DBSCAN(eps=0.2, min_samples=5, metric="cosine", algorithm="brute").fit(x).labels_
    assert adjusted_rand_score(reference, ours) == pytest.approx(1.0)
    assert ((ours == -1) == (reference == -1)).all()


def test_it_recovers_well_separated_topics_with_the_suggested_eps():
    x, y = blobs_on_sphere()
    model = SparseDBSCAN(min_samples=5).fit(x)
    assert 0.0 < model.eps_ < 1.0
    assert model.n_clusters_ == 6
    clustered = model.labels_ != -1
    assert clustered.mean() > 0.9
    assert adjusted_rand_score(y[clustered], model.labels_[clustered]) > 0.95


def test_radius_graph_keeps_only_pairs_within_eps():
    x, _ = blobs_on_sphere(n_per=20, centers=3)
    graph = radius_graph(x, 0.1)
    dense = 1.0 - x @ x.T
    rows, cols = graph.nonzero()
    assert (dense[rows, cols] <= 0.1 + 1e-5).all()
    assert graph.nnz == int((dense <= 0.1).sum())


def test_suggest_eps_grows_with_the_spread():
    tight, _ = blobs_on_sphere(spread=0.03)
    loose, _ = blobs_on_sphere(spread=0.12)
    assert suggest_eps(tight) < suggest_eps(loose)


def test_group_topics_merges_fine_topics_into_the_requested_number():
    x, y = blobs_on_sphere(n_per=80, centers=8)
    labels = y.copy()  # pretend each blob is a DBSCAN topic
    labels[::17] = -1
    groups = group_topics(x, labels, n_groups=3)
    assert set(groups.tolist()) == {0, 1, 2}
    assert (groups != -1).all()  # noise joined its nearest proposal
    # every topic lands wholly in one group
    for topic in range(8):
        assert len(set(groups[labels == topic].tolist())) == 1


def test_describe_groups_names_each_group_by_its_words():
    texts = ["renew my driver licence", "driver licence renewal fee", "licence renewal online"] * 3 + [
        "retirement benefits age", "apply for retirement benefits", "retirement benefit estimate"] * 3
    x = np.vstack([np.tile([1.0, 0.0], (9, 1)), np.tile([0.0, 1.0], (9, 1))]).astype(np.float32)
    groups = np.array([0] * 9 + [1] * 9)
    summaries = describe_groups(texts, x, groups)
    assert [s.size for s in summaries] == [9, 9]
    assert "licence" in summaries[0].keywords[:3] or "renewal" in summaries[0].keywords[:3]
    assert "retirement" in summaries[1].keywords[:3]
    assert all(0 <= i < 9 for i in summaries[0].representatives)
