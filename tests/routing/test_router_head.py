"""Router training keeps the linear head where validation prefers it, stores the choice, and serving routes with it."""

from __future__ import annotations

import pytest

from routing import services
from routing.ml.textrouter import TextRouter
from serving import route

pytestmark = pytest.mark.django_db


def test_router_training_stores_the_head_choice_with_both_validation_figures_and_serving_routes_with_the_linear_head(labelled, fake_encoder):
    labelled({"dmv": 40, "ssa": 40, "va": 40})
    # An MLP that cannot learn in one epoch at a tiny learning rate, with nothing else to lean on: validation prefers the linear head.
    version = services.train_router_from_labels({"epochs": 1, "lr": 1e-7, "seed": 0, "hidden_dim": 128, "prototypes_per_expert": 0,
                                                 "nearest_term": False, "char_view": False})
    head = version.metrics["head"]
    assert head["chosen"] == "linear"
    assert head["val_macro_f1"]["linear"] > head["val_macro_f1"]["mlp"]
    assert head["linear"]["C"] in (0.1, 1.0, 10.0, 100.0)
    assert version.metrics["val"]["macro_f1"] == pytest.approx(head["val_macro_f1"]["linear"])
    assert TextRouter.load(version.path).model.head == "linear"
    route._router_cache.clear()
    try:
        for question, slug in (("how do I renew my licence", "dmv"), ("when is my pension paid", "ssa"), ("veteran benefits", "va")):
            decision = route.route(question)
            assert decision.experts[0]["slug"] == slug
            assert decision.raw_scores[slug] > 0.5
    finally:
        route._router_cache.clear()


def test_by_default_router_training_records_which_head_serves(labelled):
    labelled({"dmv": 30, "ssa": 30})
    version = services.train_router_from_labels({"epochs": 3, "seed": 0, "hidden_dim": 128})
    head = version.metrics["head"]
    assert head["chosen"] in ("mlp", "linear")
    assert set(head["val_macro_f1"]) == {"mlp", "linear"}
    assert TextRouter.load(version.path).model.head == head["chosen"]
