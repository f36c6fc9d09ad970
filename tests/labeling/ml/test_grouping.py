"""Topic grouping into expert proposals, and naming them, on synthetic data with known structure."""

import numpy as np
import pytest
from sklearn.cluster import AgglomerativeClustering
from sklearn.metrics import adjusted_rand_score

from labeling.ml.grouping import describe_groups, group_topics, spherical_kmeans, weighted_ward

from .conftest import blobs_on_sphere


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


def test_weighted_ward_with_unit_weights_is_sklearns_ward():
    x, _ = blobs_on_sphere(n_per=15, centers=5, dim=8, spread=0.3, seed=7)
    ours = weighted_ward(x, np.ones(x.shape[0]), 5)
    reference = AgglomerativeClustering(n_clusters=5, linkage="ward").fit_predict(x)
    assert adjusted_rand_score(reference, ours) == pytest.approx(1.0)


def test_a_weight_acts_like_that_many_copies():
    x, _ = blobs_on_sphere(n_per=6, centers=4, dim=6, spread=0.4, seed=8)
    weights = np.array([1, 3, 2] * 8)
    copies = np.repeat(x, weights, axis=0)
    reference = AgglomerativeClustering(n_clusters=4, linkage="ward").fit_predict(copies)
    first_copy = np.cumsum(weights) - weights
    assert adjusted_rand_score(reference[first_copy], weighted_ward(x, weights, 4)) == pytest.approx(1.0)


def test_group_topics_numbers_proposals_by_size():
    x, y = blobs_on_sphere(n_per=60, centers=4, dim=32, seed=9)
    keep = np.concatenate([np.flatnonzero(y == k)[: 20 * (k + 1)] for k in range(4)])  # sizes 20, 40, 60, 60
    groups = group_topics(x[keep], y[keep], n_groups=4)
    sizes = np.bincount(groups)
    assert (np.diff(sizes) <= 0).all()


def test_spherical_kmeans_never_raises_the_inertia():
    x, y = blobs_on_sphere(n_per=50, centers=3, dim=16, spread=0.3, seed=11)
    start = np.random.default_rng(0).integers(0, 3, size=x.shape[0])
    _, before = spherical_kmeans(x, start, 3, max_iter=0)
    groups, after = spherical_kmeans(x, start, 3)
    assert after <= before
    assert adjusted_rand_score(y, groups) > 0.9

