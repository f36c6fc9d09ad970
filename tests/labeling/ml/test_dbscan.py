"""Sparse DBSCAN and the eps suggestion on synthetic data with known structure."""

import numpy as np
import pytest
from sklearn.cluster import DBSCAN
from sklearn.metrics import adjusted_rand_score

from labeling.ml.dbscan import SparseDBSCAN
from labeling.ml.eps_sweep import clustered_outside_largest
from labeling.ml.pair_labels import dbscan_from_pairs
from labeling.ml.radius import radius_pairs

from .conftest import blobs_on_sphere


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


def test_the_suggested_eps_grows_with_the_spread():
    tight, _ = blobs_on_sphere(spread=0.03)
    loose, _ = blobs_on_sphere(spread=0.12)
    assert SparseDBSCAN(min_samples=5).fit(tight).eps_ < SparseDBSCAN(min_samples=5).fit(loose).eps_


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


def test_the_criterion_prefers_many_topics_to_noise_and_to_one_giant():
    assert clustered_outside_largest(np.array([-1, -1, -1, -1])) == 0.0
    assert clustered_outside_largest(np.array([0, 0, 0, 0])) == 0.0
    assert clustered_outside_largest(np.array([0, 0, 1, 1])) == 0.5
    assert clustered_outside_largest(np.array([0, 0, 1, 2])) == 0.5

