"""The discovery pipeline the product runs (``labeling.ml.discovery.discover``), on synthetic data with known structure."""

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from labeling.ml import discovery
from labeling.ml.dbscan import SparseDBSCAN

from .conftest import blobs_on_sphere


@pytest.fixture(scope="module")
def domains():
    """Four domains of three topics each (topics tight, domains looser), plus a few strays."""
    rng = np.random.default_rng(3)
    dim = 24
    centres = rng.normal(size=(4, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    xs, topics, domain = [], [], []
    for d in range(4):
        for t in range(3):
            centre = centres[d] + 0.35 * rng.normal(size=dim) / np.sqrt(dim) * 3
            centre /= np.linalg.norm(centre)
            xs.append(centre + 0.04 * rng.normal(size=(40, dim)))
            topics += [3 * d + t] * 40
            domain += [d] * 40
    strays = rng.normal(size=(6, dim))
    x = np.concatenate([*xs, strays])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), np.array(domain + [-1] * 6)


@pytest.fixture(scope="module")
def fitted(domains):
    x, _ = domains
    return SparseDBSCAN(eps=None, min_samples=5).fit(x)


@pytest.mark.parametrize("grouping", discovery.GROUPINGS)
def test_every_grouping_finds_the_domains_when_told_k(domains, fitted, grouping):
    x, domain = domains
    found = discovery.discover(x, fitted, n_groups=4, grouping=grouping)
    assert (found.n_groups, found.k_suggested, found.grouping) == (4, False, grouping)
    assert set(found.groups.tolist()) == {0, 1, 2, 3}
    keep = domain >= 0
    assert adjusted_rand_score(domain[keep], found.groups[keep]) > 0.9


def test_without_k_it_is_suggested_from_the_topics_not_from_labels(domains, fitted):
    x, _ = domains
    found = discovery.discover(x, fitted)
    assert found.k_suggested
    assert found.n_groups == discovery.suggest_n_groups(x, fitted.labels_)
    assert (found.grouping, found.noise) == (discovery.DEFAULT_GROUPING, discovery.DEFAULT_NOISE)


def test_attached_noise_sits_in_a_proposal_and_left_noise_in_none(domains, fitted):
    x, _ = domains
    noise = fitted.labels_ == -1
    assert noise.any()
    attached = discovery.discover(x, fitted, n_groups=4, noise="attach")
    left = discovery.discover(x, fitted, n_groups=4, noise="leave")
    assert (attached.groups != -1).all()
    assert (left.groups[noise] == -1).all()
    assert (left.groups[~noise] != -1).all()


def test_proposals_are_numbered_largest_first(domains, fitted):
    x, _ = domains
    groups = discovery.discover(x, fitted, n_groups=4).groups
    sizes = np.bincount(groups[groups >= 0])
    assert list(sizes) == sorted(sizes, reverse=True)


def test_topics_from_another_clusterer_go_through_the_same_steps(domains, fitted):
    x, domain = domains
    other = np.where(domain >= 0, domain, -1)  # e.g. HDBSCAN's topics
    found = discovery.discover(x, fitted, n_groups=4, topics=other, grouping="topics")
    assert np.isnan(found.topic_eps)  # no radius: these topics are not DBSCAN's
    assert adjusted_rand_score(domain[domain >= 0], found.groups[domain >= 0]) == 1.0


def test_neighbour_means_average_each_row_with_its_nearest_rows():
    x, _ = blobs_on_sphere(n_per=20, centers=3, dim=8)
    z = discovery.neighbour_means(x, k=5, budget_bytes=4 * len(x) * 7)  # blocks of 7 rows
    sims = x @ x.T
    np.fill_diagonal(sims, np.inf)
    expected = x[np.argsort(-sims, axis=1)[:, :6]].mean(axis=1)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert np.allclose(z, expected, atol=1e-5)
    assert np.allclose(discovery.neighbour_means(x, k=0), x)


def test_unknown_grouping_or_noise_mode_is_refused(domains, fitted):
    x, _ = domains
    with pytest.raises(ValueError, match="grouping must be one of"):
        discovery.discover(x, fitted, n_groups=4, grouping="magic")
    with pytest.raises(ValueError, match="noise must be one of"):
        discovery.discover(x, fitted, n_groups=4, noise="hide")
