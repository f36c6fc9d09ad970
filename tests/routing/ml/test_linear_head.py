"""The router's linear head (``routing.ml.linear``): C chosen on validation, a ``RouterNet`` that serves it, and
``train_text_router`` serving it where validation prefers it (no database)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from routing.ml.linear import fit_linear, linear_router
from routing.ml.router import RouterNet
from routing.ml.textrouter import TextRouter, train_text_router
from routing.ml.training import TrainConfig


def blobs(n_per: int, n_classes: int = 3, dim: int = 16, seed: int = 0, spread: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.vstack([np.eye(dim)[c] + spread * rng.normal(size=(n_per, dim)) for c in range(n_classes)]).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True), np.repeat(np.arange(n_classes), n_per)


def test_c_is_chosen_by_validation_macro_f1_not_by_the_order_of_the_grid():
    # A rare class: at C=1e-6 the fit predicts the common classes only (its macro-F1 collapses), at C=10 it separates all three.
    x, y = blobs(40)
    keep = (y != 2) | (np.arange(len(y)) % 8 == 0)
    x_val, y_val = blobs(20, seed=1)
    model, choice = fit_linear(x[keep], y[keep], x_val, y_val, cs=(10.0, 1e-6))
    assert [row["C"] for row in choice["tried"]] == [1e-6, 10.0]  # fitted from the smallest C up
    assert choice["C"] == 10.0
    assert choice["tried"][1]["val_macro_f1"] > choice["tried"][0]["val_macro_f1"]
    assert choice["val_macro_f1"] == pytest.approx(max(r["val_macro_f1"] for r in choice["tried"]))
    assert model.C == 10.0
    assert (model.predict(x_val) == y_val).mean() == pytest.approx(choice["val_accuracy"])


def test_ties_keep_the_smaller_c():
    x, y = blobs(30, spread=0.05)  # so separable that every C gets every question right
    x_val, y_val = blobs(10, seed=1, spread=0.05)
    _, choice = fit_linear(x, y, x_val, y_val, cs=(100.0, 1.0, 10.0))
    assert {r["val_macro_f1"] for r in choice["tried"]} == {1.0}
    assert choice["C"] == 1.0


@pytest.mark.parametrize("n_classes", [2, 4])
def test_the_linear_router_gives_scikit_learns_probabilities_and_survives_a_save_and_load(n_classes, tmp_path):
    x, y = blobs(30, n_classes=n_classes, spread=0.6)
    model, _ = fit_linear(x, y, x, y, cs=(1.0,))
    net = linear_router(model, n_classes)
    assert net.head == "linear"
    with torch.no_grad():
        probs = net(torch.from_numpy(x)).softmax(dim=-1).numpy()
    np.testing.assert_allclose(probs, model.predict_proba(x), atol=1e-4)
    net.save(tmp_path / "r")
    loaded = RouterNet.load(tmp_path / "r")
    assert loaded.head == "linear"
    scorer = loaded.numpy_scorer()
    assert scorer is not None  # serving's one-question path
    one, _ = scorer.log_scores(x[0])
    np.testing.assert_allclose(np.exp(one), model.predict_proba(x[:1])[0], atol=1e-4)


def test_a_linear_head_refuses_a_convolution_or_a_context_path():
    with pytest.raises(ValueError, match="linear head"):
        RouterNet(input_dim=8, n_experts=2, use_conv=True, head="linear")
    with pytest.raises(ValueError, match="head must be"):
        RouterNet(input_dim=8, n_experts=2, use_conv=False, head="tree")


def embed_like(texts: list[str]) -> np.ndarray:
    """Typo copies land near their class's axis (the class is the first letter of the text)."""
    rng = np.random.default_rng(len(texts))
    x = np.vstack([np.eye(16)["abc".index(t[0]) if t[0] in "abc" else 3] + 0.3 * rng.normal(size=16) for t in texts]).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def texts_for(y: np.ndarray) -> list[str]:
    return [f"{'abc'[c]}{'abc'[c]} question {i}" for i, c in enumerate(y)]


def neutral(y: np.ndarray) -> list[str]:
    return [f"question number {i}" for i in range(len(y))]


def test_training_serves_the_linear_head_where_validation_prefers_it_and_records_both_figures(tmp_path):
    x, y = blobs(40)
    x_val, y_val = blobs(15, seed=1)
    # An MLP that barely trains (one epoch at a tiny learning rate, no prototypes or nearest questions to lean on) loses to the linear
    # head on validation; the words say nothing of the class, so the spelling view cannot rescue it either.
    config = TrainConfig(epochs=1, lr=1e-7, seed=0, typo_rate=0.1, prototypes_per_expert=0, nearest_term=False)
    result = train_text_router(neutral(y), x, y, neutral(y_val), x_val, y_val, 3, embed_like, {"use_conv": False, "hidden_dim": 128}, config)
    head = result.metrics["head"]
    assert head["chosen"] == "linear"
    assert head["val_macro_f1"]["linear"] > head["val_macro_f1"]["mlp"]
    assert head["linear"]["C"] in config.linear_cs
    assert len(head["linear"]["tried"]) == len(config.linear_cs)
    assert result.model.head == "linear"
    assert result.metrics["val"]["macro_f1"] == pytest.approx(head["val_macro_f1"]["linear"])
    router = result.router  # type: ignore[attr-defined]
    assert router.model is result.model
    router.save(tmp_path / "v1")
    loaded = TextRouter.load(tmp_path / "v1")
    assert loaded.model.head == "linear"
    x_test, y_test = blobs(10, seed=2)
    probs, _scores = loaded.scores(x_test, neutral(y_test))
    np.testing.assert_allclose(probs, router.scores(x_test, neutral(y_test))[0], atol=1e-5)
    assert (probs.argmax(axis=1) == y_test).mean() > 0.9
    one, _ = loaded.score_one(x_test[0], neutral(y_test)[0])  # the numpy path serving takes
    np.testing.assert_allclose(one, probs[0], atol=1e-5)


def test_a_tie_or_a_better_mlp_keeps_the_mlp_and_linear_head_false_fits_none():
    x, y = blobs(40, spread=0.05)
    x_val, y_val = blobs(15, seed=1, spread=0.05)
    config = TrainConfig(epochs=5, seed=0, typo_rate=0.0, char_view=False)
    result = train_text_router(texts_for(y), x, y, texts_for(y_val), x_val, y_val, 3, embed_like, {"use_conv": False, "hidden_dim": 128}, config)
    head = result.metrics["head"]
    assert head["val_macro_f1"] == {"mlp": 1.0, "linear": 1.0}
    assert (head["chosen"], result.model.head) == ("mlp", "mlp")
    off = train_text_router(texts_for(y), x, y, texts_for(y_val), x_val, y_val, 3, embed_like, {"use_conv": False, "hidden_dim": 128},
                            TrainConfig(epochs=5, seed=0, typo_rate=0.0, char_view=False, linear_head=False))
    assert off.metrics["head"] == {"chosen": "mlp", "rule": head["rule"]}
