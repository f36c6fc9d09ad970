"""The nearest training questions as routing evidence: the weight chosen on validation, and what it changes."""

import numpy as np

from routing.ml.textrouter import NEAREST_WEIGHTS, fit_nearest_weight, nearest_logits
from tests.support.toy_router import trained


def router_and_evidence(seed: int, n: int = 600, experts: int = 4, evidence_says: float = 0.15):
    """A hesitant router (right 60% of the time) and per-expert nearest-question cosines that favour the gold expert by ``evidence_says``."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % experts
    logits = rng.normal(size=(n, experts))
    logits[np.arange(n), y] += 0.8
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    evidence = rng.normal(0.5, 0.05, size=(n, experts))
    evidence[np.arange(n), y] += evidence_says
    return probs, evidence, y


def test_nearest_questions_that_know_better_get_weight_and_route_more_questions_right():
    probs, evidence, y = router_and_evidence(0)
    fitted = fit_nearest_weight(probs, evidence, y, clean=400)  # the last 200 rows play the typo copies
    assert fitted["weight"] > 0
    assert fitted["temperature"] > 0
    assert [t["weight"] for t in fitted["tried"]] == list(NEAREST_WEIGHTS)
    test_probs, test_evidence, test_y = router_and_evidence(1)
    before = (test_probs.argmax(axis=1) == test_y).mean()
    after = (nearest_logits(test_probs, test_evidence, fitted["weight"]).argmax(axis=1) == test_y).mean()
    assert after > before + 0.1


def test_nearest_questions_that_know_nothing_leave_the_probabilities_as_they_were():
    probs, evidence, y = router_and_evidence(2, evidence_says=0.0)
    fitted = fit_nearest_weight(probs, evidence, y, clean=400)
    assert fitted["weight"] == 0.0
    assert fitted["temperature"] == 1.0
    np.testing.assert_allclose(np.exp(nearest_logits(probs, evidence, 0.0)), probs, atol=1e-9)


def test_a_trained_router_records_the_nearest_questions_choice():
    result = trained()
    found = result.metrics["nearest"]
    assert found["weight"] in NEAREST_WEIGHTS
    assert found["bank"] > 0
    assert found["kept"] == (result.router.bank is not None)
    assert found["kept"] == bool(found["weight"] or result.metrics["in_scope"]["nearest_mix"])


def test_the_weight_routes_the_validation_questions_to_the_best_macro_f1_it_tried():
    probs, evidence, y = router_and_evidence(4, evidence_says=0.05)  # the lowest NLL (weight 20) is not the best macro-F1 (40)
    fitted = fit_nearest_weight(probs, evidence, y, clean=400)
    best = max(t["val_macro_f1"] for t in fitted["tried"])
    assert next(t["val_macro_f1"] for t in fitted["tried"] if t["weight"] == fitted["weight"]) == best
    assert len({t["val_macro_f1"] for t in fitted["tried"]}) > 1  # the weights route differently: the choice is a real one
