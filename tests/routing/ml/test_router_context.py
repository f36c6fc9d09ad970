"""The conversation-context path: a GRU over previous turns, concatenated before the gating MLP."""

import numpy as np
import pytest
import torch

from routing.ml.router import RouterNet
from routing.ml.training import Context, TrainConfig, predict_proba, train_router


def make(context_dim=64, **kwargs):
    torch.manual_seed(0)
    return RouterNet(input_dim=16, n_experts=3, context_dim=context_dim, hidden_dim=128, **kwargs).eval()


def test_no_history_and_empty_history_give_the_same_logits():
    model = make()
    x = torch.randn(4, 16)
    empty = torch.zeros(4, 3, 16)
    assert torch.allclose(model(x), model(x, empty, torch.zeros(4, dtype=torch.long)))


def test_history_changes_the_logits_and_padding_does_not():
    model = make()
    x, turns = torch.randn(2, 16), torch.randn(2, 2, 16)
    with_history = model(x, turns, torch.tensor([2, 2]))
    assert not torch.allclose(with_history, model(x))
    padded = torch.cat([turns, torch.randn(2, 3, 16)], dim=1)  # junk after the real turns is ignored
    assert torch.allclose(with_history, model(x, padded, torch.tensor([2, 2])), atol=1e-6)


def test_rows_with_and_without_history_mix_in_one_batch():
    model = make()
    x, turns = torch.randn(3, 16), torch.randn(3, 2, 16)
    mixed = model(x, turns, torch.tensor([2, 0, 1]))
    assert torch.allclose(mixed[1], model(x[1:2])[0], atol=1e-6)
    assert torch.allclose(mixed[2], model(x[2:3], turns[2:3, :1], torch.tensor([1]))[0], atol=1e-6)


def test_the_context_summary_has_context_dim_numbers():
    model = make(context_dim=64)
    assert model.encode_context(torch.randn(5, 2, 16), None, 5).shape == (5, 64)


def test_a_context_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="context must be"):
        make()(torch.randn(2, 16), torch.randn(3, 1, 16))


def test_context_off_ignores_history_and_keeps_the_old_parameter_names():
    model = make(context_dim=0)
    x = torch.randn(2, 16)
    assert torch.equal(model(x), model(x, torch.randn(2, 2, 16)))
    assert not any(name.startswith("context_gru") for name in model.state_dict())


@pytest.mark.parametrize("use_conv", [True, False])
def test_a_context_router_saves_and_loads_exactly(tmp_path, use_conv):
    model = make(use_conv=use_conv)
    x, turns, lengths = torch.randn(3, 16), torch.randn(3, 2, 16), torch.tensor([2, 1, 0])
    model.save(tmp_path / "r")
    loaded = RouterNet.load(tmp_path / "r")
    assert loaded.get_config_dict()["context_dim"] == 64
    assert torch.allclose(model(x, turns, lengths), loaded(x, turns, lengths))


@pytest.mark.parametrize("hidden_dim", [64, 1024])
def test_hidden_sizes_outside_128_to_512_are_refused(hidden_dim):
    with pytest.raises(ValueError, match="hidden_dim"):
        RouterNet(input_dim=16, n_experts=2, hidden_dim=hidden_dim)


def test_training_uses_the_history_when_the_question_alone_is_ambiguous():
    # Half the questions are one shared ambiguous vector; only the previous turn tells the expert.
    rng = np.random.default_rng(0)
    dim, n = 16, 600
    topics = rng.normal(size=(2, dim)).astype(np.float32)
    y = rng.integers(0, 2, n)
    ambiguous = rng.random(n) < 0.5
    x = topics[y] + 0.3 * rng.normal(size=(n, dim)).astype(np.float32)
    x[ambiguous] = rng.normal(size=dim).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    turns = (topics[y] + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)[:, None, :]
    turns /= np.linalg.norm(turns, axis=2, keepdims=True)
    context = Context(turns, np.ones(n, dtype=np.int64))
    tr, va = slice(0, 400), slice(400, n)
    config = TrainConfig(epochs=40, seed=0, prototypes_per_expert=0, context_dropout=0.2, device="cpu")
    result = train_router(x[tr], y[tr], x[va], y[va], 2, {"context_dim": 8, "use_conv": False, "hidden_dim": 128}, config,
                          context_train=Context(turns[tr], context.lengths[tr]), context_val=Context(turns[va], context.lengths[va]))
    test = np.arange(400, n)[ambiguous[400:]]
    with_history = (predict_proba(result.model, x[test], Context(turns[test], np.ones(len(test), dtype=np.int64))).argmax(1) == y[test]).mean()
    without = (predict_proba(result.model, x[test]).argmax(1) == y[test]).mean()
    assert with_history > 0.9
    assert without < 0.75
