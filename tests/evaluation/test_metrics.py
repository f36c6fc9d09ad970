"""Clustering scores against gold labels, with noise (-1) counted as the module documents."""

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from evaluation.metrics import purity, score_clustering


def test_purity_counts_each_clusters_majority_label():
    gold = ["a", "a", "a", "b", "b", "b"]
    predicted = [0, 0, 1, 1, 1, 1]
    # cluster 0: a, a -> 2; cluster 1: a, b, b, b -> 3
    assert purity(gold, predicted) == pytest.approx(5 / 6)


def test_purity_counts_noise_as_wrong():
    gold = ["a", "a", "b", "b"]
    assert purity(gold, [0, -1, 1, -1]) == pytest.approx(2 / 4)
    assert purity(gold, [-1, -1, -1, -1]) == 0.0


def test_one_cluster_per_point_is_perfectly_pure_but_scores_low_nmi():
    gold = ["a", "a", "b", "b"]
    scores = score_clustering(gold, [0, 1, 2, 3])
    assert scores.purity == 1.0
    assert scores.homogeneity == pytest.approx(1.0)
    assert scores.completeness < 1.0


def test_a_perfect_clustering_scores_one_everywhere_whatever_the_label_names():
    gold = ["x", "x", "y", "y", "z"]
    scores = score_clustering(gold, [7, 7, 3, 3, 5])
    assert (scores.ari, scores.nmi, scores.v_measure, scores.purity) == (1.0, 1.0, 1.0, 1.0)
    assert scores.n_clusters == 3
    assert scores.noise_fraction == 0.0


def test_noise_is_scored_as_one_more_cluster():
    gold = ["a", "a", "a", "b", "b", "b"]
    predicted = np.array([0, 0, -1, 1, 1, -1])
    scores = score_clustering(gold, predicted)
    assert scores.ari == pytest.approx(adjusted_rand_score(gold, predicted))
    assert scores.nmi == pytest.approx(normalized_mutual_info_score(gold, predicted))
    assert scores.n_clusters == 2
    assert scores.noise_fraction == pytest.approx(2 / 6)
    assert scores.purity == pytest.approx(4 / 6)


def test_as_dict_has_the_reported_keys():
    assert set(score_clustering(["a", "b"], [0, 1]).as_dict()) >= {"n_clusters", "noise_fraction", "ari", "nmi", "v_measure", "purity"}


def test_it_rejects_labels_of_different_lengths():
    with pytest.raises(ValueError, match="length"):
        score_clustering(["a", "b"], [0])
