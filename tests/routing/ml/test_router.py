"""The router network saves and loads exactly, and training learns, balances and is reproducible."""

import numpy as np
import pytest
import torch

from routing.ml.router import RouterNet
from routing.ml.training import TrainConfig, inject_label_noise, predict_proba, switch_balance_loss, train_router


def separable(n=400, experts=4, dim=48, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(experts, dim)) * 2
    y = rng.integers(0, experts, n)
    x = centers[y] + rng.normal(size=(n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), y


@pytest.mark.parametrize("use_conv", [True, False])
def test_save_and_load_round_trip(tmp_path, use_conv):
    model = RouterNet(input_dim=48, n_experts=3, use_conv=use_conv, hidden_dim=128).eval()
    x = torch.randn(5, 48)
    model.save(tmp_path / "r")
    loaded = RouterNet.load(tmp_path / "r")
    assert loaded.get_config_dict() == model.get_config_dict()
    assert torch.allclose(model(x), loaded(x))


def test_training_learns_a_separable_task_and_is_reproducible():
    x, y = separable()
    config = TrainConfig(epochs=30, seed=3)
    first = train_router(x[:300], y[:300], x[300:], y[300:], 4, config=config)
    second = train_router(x[:300], y[:300], x[300:], y[300:], 4, config=config)
    assert first.metrics["val"]["accuracy"] > 0.95
    assert first.history
    assert first.best_epoch >= 1
    np.testing.assert_allclose(predict_proba(first.model, x[300:]), predict_proba(second.model, x[300:]), atol=1e-6)


def test_balance_loss_is_one_when_uniform_and_larger_when_concentrated():
    uniform = torch.eye(4) * 5  # each row picks a different expert, confidently
    concentrated = torch.tensor([[5.0, 0, 0, 0]] * 4)
    assert float(switch_balance_loss(uniform)) == pytest.approx(1.0, abs=0.05)
    assert float(switch_balance_loss(concentrated)) > 3.0


def test_label_noise_flips_the_requested_share_to_other_classes():
    y = np.zeros(10000, dtype=int)
    noisy = inject_label_noise(y, 0.2, 5, np.random.default_rng(0))
    assert abs((noisy != y).mean() - 0.2) < 0.02
    assert set(np.unique(noisy[noisy != 0]).tolist()) == {1, 2, 3, 4}
