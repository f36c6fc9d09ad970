"""Drift detection on synthetic embeddings: no false alarm on the same distribution, alarm on a shift."""

from __future__ import annotations

import numpy as np
import pytest

from routing.ml import drift


def _embeddings(rng, n, shift=0.0, dim=24):
    x = rng.normal(size=(n, dim))
    x[:, 0] += 3.0  # a common direction, as real sentence embeddings have
    x[:, 1] += shift
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_same_distribution_is_not_drift():
    rng = np.random.default_rng(0)
    result = drift.detect(_embeddings(rng, 150), _embeddings(rng, 200), n_permutations=200)
    assert not result.drifted
    assert 0.35 < result.c2st_auc < 0.65
    assert result.mean_shift_p > 0.01


def test_a_shifted_distribution_is_drift_with_reasons():
    rng = np.random.default_rng(1)
    result = drift.detect(_embeddings(rng, 150, shift=1.5), _embeddings(rng, 200), n_permutations=200)
    assert result.drifted
    assert result.c2st_auc > 0.8
    assert result.c2st_p < 1e-6
    assert result.mean_shift_p < 0.01
    assert any("classifier" in r for r in result.reasons)


def test_more_abstentions_than_at_training_is_drift():
    rng = np.random.default_rng(2)
    result = drift.detect(_embeddings(rng, 100), _embeddings(rng, 100), abstained=60, requests=300, train_abstain_rate=0.05, n_permutations=100)
    assert result.abstain_rate_recent == pytest.approx(0.2)
    assert result.drifted
    assert any("abstains" in r for r in result.reasons)


def test_too_few_questions_is_refused():
    rng = np.random.default_rng(3)
    with pytest.raises(ValueError, match="at least 10"):
        drift.detect(_embeddings(rng, 5), _embeddings(rng, 100))


def _blob(rng, axis, n, dim=16, noise=0.15):
    x = np.eye(dim)[axis] + noise * rng.normal(size=(n, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_a_dense_group_far_from_every_expert_is_uncovered():
    rng = np.random.default_rng(4)
    experts = np.eye(16)[:2]
    x = np.vstack([_blob(rng, 0, 30), _blob(rng, 5, 20), rng.normal(size=(5, 16)) / 4])
    clusters = drift.uncovered_clusters(x, experts)
    assert len(clusters) == 1
    assert sorted(clusters[0].members) == list(range(30, 50))
    assert clusters[0].similarity < 0.45


def test_without_experts_every_dense_group_is_uncovered():
    rng = np.random.default_rng(5)
    x = np.vstack([_blob(rng, 0, 20), _blob(rng, 3, 12)])
    assert [len(c.members) for c in drift.uncovered_clusters(x, np.zeros((0, 16)))] == [20, 12]
