"""Training refuses data it cannot learn from, aborts on NaN losses, and calibrates what it trains."""

import numpy as np
import pytest
import torch

from routing.ml.router import RouterNet
from routing.ml.training import TrainConfig, TrainingDiverged, build_prototypes, route_scores, train_router


def blobs(n=300, experts=3, dim=24, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(experts, dim)) * 2
    y = np.arange(n) % experts
    x = centers[y] + rng.normal(size=(n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), y


FAST = TrainConfig(epochs=5, seed=0, device="cpu")


def test_one_expert_is_refused_with_a_clear_error():
    x, _ = blobs()
    y = np.zeros(len(x), dtype=int)
    with pytest.raises(ValueError, match="at least two experts"):
        train_router(x[:200], y[:200], x[200:], y[200:], 1, config=FAST)


def test_an_expert_without_training_examples_is_named():
    x, y = blobs()
    keep = y[:200] != 2
    with pytest.raises(ValueError, match=r"experts \[2\] have no training examples"):
        train_router(x[:200][keep], y[:200][keep], x[200:], y[200:], 3, config=FAST)


def test_nan_embeddings_are_refused_before_training():
    x, y = blobs()
    x[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        train_router(x[:200], y[:200], x[200:], y[200:], 3, config=FAST)


def test_labels_out_of_range_are_refused():
    x, y = blobs()
    with pytest.raises(ValueError, match="expert indices"):
        train_router(x[:200], y[:200], x[200:], y[200:] + 5, 3, config=FAST)


def test_an_empty_validation_split_is_refused():
    x, y = blobs()
    with pytest.raises(ValueError, match="validation split is empty"):
        train_router(x, y, x[:0], y[:0], 3, config=FAST)


def test_a_diverging_loss_aborts_training():
    x, y = blobs()
    with pytest.raises(TrainingDiverged, match="lower the learning rate"):
        train_router(x[:200], y[:200], x[200:], y[200:], 3, config=TrainConfig(epochs=5, lr=1e30, seed=0, device="cpu"))


def test_training_fits_prototypes_temperature_and_an_abstain_threshold_on_validation():
    x, y = blobs(n=600)
    result = train_router(x[:400], y[:400], x[400:], y[400:], 3, {"use_conv": False, "hidden_dim": 128}, TrainConfig(epochs=10, seed=0, device="cpu"))
    metrics = result.metrics
    assert metrics["temperature"] > 0
    assert metrics["prototype_weight"] in (0.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
    assert metrics["abstain_score"] == "prototype_similarity"
    _, scores = route_scores(result.model, x[400:])
    assert (scores >= metrics["abstain_threshold"]).mean() >= 0.95  # the target in-scope recall on validation
    far = -x[400:410]  # the antipodes of real questions: nothing like the training data
    assert (route_scores(result.model, far)[1] < metrics["abstain_threshold"]).all()


def test_prototypes_are_unit_length_and_bounded_per_expert():
    x, y = blobs(n=900)
    prototypes = build_prototypes(x, y, 3, per_expert=32, max_total=4096)
    assert [len(p) for p in prototypes] == [30, 30, 30]  # about ten queries per prototype
    assert np.allclose(np.linalg.norm(np.concatenate(prototypes), axis=1), 1.0, atol=1e-5)
    assert [len(p) for p in build_prototypes(x, y, 3, per_expert=32, max_total=30)] == [10, 10, 10]


def test_a_router_with_prototypes_saves_and_loads_them(tmp_path):
    x, y = blobs()
    result = train_router(x[:200], y[:200], x[200:], y[200:], 3, {"use_conv": False, "hidden_dim": 128}, FAST)
    result.model.save(tmp_path / "r")
    loaded = RouterNet.load(tmp_path / "r")
    assert loaded.prototype_weight == result.model.prototype_weight
    assert loaded.temperature == result.model.temperature
    np.testing.assert_allclose(route_scores(loaded, x)[0], route_scores(result.model, x)[0], atol=1e-6)
    np.testing.assert_allclose(route_scores(loaded, x)[1], route_scores(result.model, x)[1], atol=1e-6)


def test_the_prototype_memory_shrinks_to_the_largest_experts_count():
    model = RouterNet(input_dim=24, n_experts=2, use_conv=False, hidden_dim=128, prototypes_per_expert=32)
    model.set_prototypes([np.eye(24, dtype=np.float32)[:3], np.eye(24, dtype=np.float32)[3:5]])
    assert model.prototypes_per_expert == 3
    assert model.prototypes.shape == (2, 3, 24)
    assert model.prototype_mask.tolist() == [[True, True, True], [True, True, False]]
    sims = model.prototype_similarity(torch.eye(24)[[4, 10]])
    assert sims.tolist() == [[0.0, 1.0], [0.0, 0.0]]  # a padding slot never wins


@pytest.mark.parametrize("with_prototypes", [True, False])
def test_the_numpy_serving_path_gives_the_same_scores_as_torch(with_prototypes):
    x, y = blobs(n=300)
    config = TrainConfig(epochs=3, seed=0, device="cpu", prototypes_per_expert=32 if with_prototypes else 0)
    model = train_router(x[:200], y[:200], x[200:], y[200:], 3, {"use_conv": False, "hidden_dim": 128}, config).model
    scorer = model.numpy_scorer()
    probs, scores = route_scores(model, x[200:210])
    for i in range(10):
        log_p, s = scorer.log_scores(x[200 + i])
        np.testing.assert_allclose(np.exp(log_p), probs[i], atol=1e-5)
        assert s == pytest.approx(float(scores[i]), abs=1e-5)


def test_routers_with_a_convolution_or_a_context_path_have_no_numpy_path():
    assert RouterNet(input_dim=24, n_experts=2, use_conv=True).numpy_scorer() is None
    assert RouterNet(input_dim=24, n_experts=2, use_conv=False, context_dim=8).numpy_scorer() is None
