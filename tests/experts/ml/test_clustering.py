"""Sparse DBSCAN, the eps suggestion and topic grouping on synthetic data with known structure."""

import numpy as np
import pytest
from sklearn.cluster import DBSCAN, AgglomerativeClustering
from sklearn.metrics import adjusted_rand_score

from experts.ml.clustering import (
    SparseDBSCAN,
    capped_pairs,
    clustered_outside_largest,
    dbscan_from_pairs,
    describe_groups,
    group_topics,
    propose_experts,
    radius_graph,
    radius_pairs,
    spherical_kmeans,
    suggest_eps,
    weighted_ward,
)


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


# --- exactness at scale: precisions, capped pairs -------------------------------------------------


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_both_precisions_give_sklearns_labels(precision):
    x, _ = blobs_on_sphere(n_per=80, centers=5, dim=48, spread=0.1, seed=2)
    reference = DBSCAN(eps=0.25, min_samples=5, metric="cosine", algorithm="brute").fit(x).labels_
    ours = SparseDBSCAN(eps=0.25, min_samples=5, precision=precision, block=50).fit(x).labels_
    assert ours.tolist() == reference.tolist()


def test_bfloat16_pairs_are_the_float32_pairs():
    x, _ = blobs_on_sphere(n_per=50, centers=4, dim=64, spread=0.12, seed=3)
    exact = radius_pairs(x, 0.3, precision="float32")
    fast = radius_pairs(x, 0.3, precision="bfloat16")
    assert sorted(zip(*exact[:2], strict=True)) == sorted(zip(*fast[:2], strict=True))


def test_a_capped_pass_keeps_core_points_exact_and_memory_bounded():
    x, _ = blobs_on_sphere(n_per=200, centers=3, dim=32, spread=0.08, seed=4)
    reference = DBSCAN(eps=0.2, min_samples=5, metric="cosine", algorithm="brute").fit(x)
    model = SparseDBSCAN(eps=0.2, min_samples=5, max_pairs=3000).fit(x)
    assert model.n_capped_rows_ > 0
    assert model.n_pairs_ <= 600 * 40  # at most 8 * min_samples kept per row
    assert model.core_sample_indices_.tolist() == reference.core_sample_indices_.tolist()
    assert adjusted_rand_score(reference.labels_, model.labels_) == pytest.approx(1.0)


def test_capped_pairs_count_every_neighbour_within_each_radius():
    x, _ = blobs_on_sphere(n_per=40, centers=2, dim=16, spread=0.1, seed=5)
    grid = np.array([0.05, 0.1, 0.2])
    i, _, d, counts = capped_pairs(x, grid, cap=3)
    dense = 1.0 - x @ x.T
    np.fill_diagonal(dense, np.inf)
    for g, radius in enumerate(grid):
        assert counts[:, g].tolist() == (dense <= radius + 1e-6).sum(axis=1).tolist()
    assert np.bincount(i, minlength=x.shape[0]).max() <= 3
    assert (d <= 0.2 + 1e-6).all()


def test_dbscan_from_pairs_numbers_clusters_and_borders_like_sklearn():
    # 0-1-2-3 chain and a separate triangle 5-6-7; point 4 touches both clusters' core points.
    pairs = [(0, 1), (0, 2), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (5, 7), (6, 7)]
    i, j = (np.array(v) for v in zip(*pairs, strict=True))
    labels, core = dbscan_from_pairs(9, i, j, min_samples=3)
    assert core.tolist() == [True, True, True, True, True, True, True, True, False]
    assert labels.tolist() == [0, 0, 0, 0, 0, 0, 0, 0, -1]
    labels, core = dbscan_from_pairs(9, i, j, min_samples=4)
    # only 2 and 5 have 4 points within reach (self included): two clusters, borders to the first
    assert np.flatnonzero(core).tolist() == [2, 5]
    assert labels.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, -1]


def test_the_suggested_eps_comes_from_one_pass_and_is_reported_with_its_curve():
    x, _ = blobs_on_sphere(n_per=120, centers=5, dim=32, spread=0.08, seed=6)
    model = SparseDBSCAN(min_samples=5).fit(x)
    scores = [score for _, score in model.eps_curve_]
    assert model.eps_ in [eps for eps, _ in model.eps_curve_]
    assert max(scores) == dict(model.eps_curve_)[model.eps_]
    assert suggest_eps(x, min_samples=5) == pytest.approx(model.eps_)


def test_the_criterion_prefers_many_topics_to_noise_and_to_one_giant():
    assert clustered_outside_largest(np.array([-1, -1, -1, -1])) == 0.0
    assert clustered_outside_largest(np.array([0, 0, 0, 0])) == 0.0
    assert clustered_outside_largest(np.array([0, 0, 1, 1])) == 0.5
    assert clustered_outside_largest(np.array([0, 0, 1, 2])) == 0.5


# --- grouping -------------------------------------------------------------------------------------


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


def test_group_topics_can_leave_noise_alone():
    x, y = blobs_on_sphere(n_per=40, centers=4, dim=32, seed=10)
    labels = y.copy()
    labels[::9] = -1
    groups = group_topics(x, labels, n_groups=2, assign_noise=False)
    assert ((groups == -1) == (labels == -1)).all()


def test_spherical_kmeans_never_raises_the_inertia():
    x, y = blobs_on_sphere(n_per=50, centers=3, dim=16, spread=0.3, seed=11)
    start = np.random.default_rng(0).integers(0, 3, size=x.shape[0])
    _, before = spherical_kmeans(x, start, 3, max_iter=0)
    groups, after = spherical_kmeans(x, start, 3)
    assert after <= before
    assert adjusted_rand_score(y, groups) > 0.9


def test_labels_at_a_smaller_radius_match_a_fit_at_that_radius():
    x, _ = blobs_on_sphere(n_per=80, centers=4, dim=32, spread=0.1, seed=12)
    model = SparseDBSCAN(eps=0.3).fit(x)
    assert model.labels_at(0.2).tolist() == SparseDBSCAN(eps=0.2).fit(x).labels_.tolist()
    assert model.labels_at(0.5) is model.labels_


def test_propose_experts_groups_topics_from_a_radius_the_sweep_tried():
    x, y = blobs_on_sphere(n_per=70, centers=6, dim=32, spread=0.12, seed=13)
    model = SparseDBSCAN().fit(x)
    groups, radius = propose_experts(x, model, n_groups=3)
    assert radius <= model.eps_
    assert radius in [eps for eps, _ in model.eps_curve_]
    assert sorted(set(groups.tolist())) == [0, 1, 2]
    # each generating blob ends up (almost) whole in one proposal
    assert all(np.bincount(groups[y == blob]).max() >= 0.95 * (y == blob).sum() for blob in range(6))
