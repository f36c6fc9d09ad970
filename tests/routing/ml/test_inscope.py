"""The in-scope score: the bank of training questions, the held-out-expert choice of evidence, saving and serving it."""

import json

import numpy as np
import pytest

from routing.ml.inscope import CHAR_SCALES, NEAREST_MIXES, InScope, fit_in_scope, nearest_bank
from routing.ml.textrouter import BANK_FILE, BLEND_FILE, TextRouter
from tests.routing.ml.test_charview import questions, trained, word_embed


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def scattered(seed: int, experts: int = 4, groups: int = 6, per_group: int = 12, dim: int = 48):
    """Each expert's questions in tight groups pointing in unrelated directions: the expert's centre is
    near none of them (as long, varied questions average out), its nearest questions are close to each."""
    rng = np.random.default_rng(seed)
    centres = unit(rng.normal(size=(experts, groups, dim)))
    x, y = [], []
    for e in range(experts):
        for g in range(groups):
            x.append(unit(centres[e, g] + 0.15 * rng.normal(size=(per_group, dim)) / np.sqrt(dim)))
            y += [e] * per_group
    return centres, np.vstack(x).astype(np.float32), np.array(y)


def prototype_evidence(x, centres):
    means = unit(centres.mean(axis=1))  # one prototype per expert: the mean direction
    return x @ means.T


def test_the_bank_keeps_every_expert_in_proportion_within_its_cap():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 8)).astype(np.float32)
    y = np.r_[np.zeros(900, int), np.ones(97, int), np.full(3, 2)]
    bank, bank_y = nearest_bank(x, y, 3, cap=100, seed=0)
    assert len(bank) <= 100
    assert set(bank_y.tolist()) == {0, 1, 2}
    assert 80 <= (bank_y == 0).sum() <= 92
    assert 8 <= (bank_y == 1).sum() <= 12
    np.testing.assert_allclose(np.linalg.norm(bank, axis=1), 1.0, atol=1e-5)
    again, _ = nearest_bank(x, y, 3, cap=100, seed=0)
    np.testing.assert_array_equal(bank, again)
    whole, _ = nearest_bank(x, y, 3, cap=5000)
    assert len(whole) == 1000
    with pytest.raises(ValueError, match="positive cap"):
        nearest_bank(x, y, 3, cap=0)


def test_nearest_questions_are_chosen_where_prototypes_are_too_coarse():
    centres, x_train, y_train = scattered(0)
    _, x_val, y_val = scattered(0)  # the same groups, other questions
    x_val = unit(x_val + 0.05 * np.random.default_rng(1).normal(size=x_val.shape)).astype(np.float32)
    bank, bank_y = nearest_bank(x_train, y_train, 4, cap=4096)
    fitted = fit_in_scope(prototype_evidence(x_val, centres), "prototypes", x_val, y_val, bank, bank_y, None, 0.0)
    assert fitted.mix > 0
    assert fitted.bank is not None
    assert len(fitted.report["candidates"]) == len(NEAREST_MIXES)
    # The choice carries to questions of an expert the router never saw (the out-of-scope case).
    _, x_out, _ = scattered(7, experts=1)
    x_in = x_val[::3]
    score_in = fitted.combine(prototype_evidence(x_in, centres).max(axis=1), x_in, None)
    score_out = fitted.combine(prototype_evidence(x_out, centres).max(axis=1), x_out, None)
    prototypes_only = InScope()
    assert score_in.min() > score_out.max()
    assert not (prototypes_only.combine(prototype_evidence(x_in, centres).max(axis=1), x_in, None).min()
                > prototypes_only.combine(prototype_evidence(x_out, centres).max(axis=1), x_out, None).max())


def test_the_confidence_counts_only_where_it_tells_experts_apart():
    rng = np.random.default_rng(3)
    n, experts = 400, 4
    y = np.arange(n) % experts
    x = unit(rng.normal(size=(n, 16))).astype(np.float32)
    bank, bank_y = nearest_bank(unit(rng.normal(size=(200, 16))).astype(np.float32), np.arange(200) % experts, experts, cap=4096)
    network = rng.uniform(0.3, 0.5, size=(n, experts))  # knows nothing
    logits = rng.normal(size=(n, experts))
    useless = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    logits[np.arange(n), y] += 4.0
    telling = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert fit_in_scope(network, "prototypes", x, y, bank, bank_y, telling, 1.0).char_scale > 0
    none = fit_in_scope(network + 3.0 * (np.arange(experts) == y[:, None]), "prototypes", x, y, bank, bank_y, useless, 1.0)
    assert none.char_scale == 0.0
    assert {c["char_scale_factor"] for c in none.report["candidates"]} == set(CHAR_SCALES)


def test_probabilities_as_the_network_evidence_are_renormalised_without_the_held_out_expert():
    rng = np.random.default_rng(4)
    n, experts = 300, 3
    y = np.arange(n) % experts
    x = unit(rng.normal(size=(n, 8))).astype(np.float32)
    logits = rng.normal(size=(n, experts))
    logits[np.arange(n), y] += 5.0
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    bank, bank_y = nearest_bank(x, y, experts, cap=4096)
    fitted = fit_in_scope(probs, "probabilities", x, y, bank, bank_y, None, 0.0)
    best = max(fitted.report["candidates"], key=lambda c: c["auroc"])
    assert best["auroc"] > 0.9  # the held-out expert's questions leave a flat rest: low highest probability


def test_bad_input_is_refused():
    x = np.zeros((4, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="every validation question"):
        fit_in_scope(np.zeros((4, 2)), "prototypes", x, np.zeros(3, int), x, np.zeros(4, int), None, 0.0)
    with pytest.raises(ValueError, match="no bank"):
        InScope().nearest(x)
    one = fit_in_scope(np.zeros((4, 2)), "prototypes", x, np.zeros(4, int), x, np.zeros(4, int), None, 1.0)
    assert one.mix == 0.0
    assert "skipped" in one.report


def test_a_router_with_nearest_evidence_scores_the_same_saved_and_one_question_at_a_time(tmp_path):
    router = trained().router
    texts, y = questions(3, 60)
    bank, _ = nearest_bank(word_embed(texts), y, 3, cap=50)
    router.in_scope = InScope(0.5, router.score_scale, bank)
    router.save(tmp_path / "v1")
    assert (tmp_path / "v1" / BANK_FILE).exists()
    loaded = TextRouter.load(tmp_path / "v1")
    assert loaded.in_scope.mix == 0.5
    probes = ["how do i renw my drivr licnse", "apply for student aid", "weather tomorrow"]
    x = word_embed(probes)
    probs, scores = router.scores(x, probes)
    np.testing.assert_allclose(loaded.scores(x, probes)[1], scores, atol=1e-5)
    network = TextRouter(router.model, router.char_view, router.weight, router.temperature, InScope(0.0, router.score_scale)).scores(x, probes)[1]
    assert not np.allclose(scores, network)
    for i, text in enumerate(probes):
        p, s = loaded.score_one(x[i], text)
        np.testing.assert_allclose(p, probs[i], atol=1e-5)
        assert s == pytest.approx(float(scores[i]), abs=1e-5)


def test_a_router_saved_before_the_nearest_evidence_keeps_its_score(tmp_path):
    router = trained().router
    router.in_scope = InScope(0.0, router.score_scale)
    router.save(tmp_path / "old")
    blend = json.loads((tmp_path / "old" / BLEND_FILE).read_text())
    blend.pop("nearest_mix")
    (tmp_path / "old" / BLEND_FILE).write_text(json.dumps(blend))
    loaded = TextRouter.load(tmp_path / "old")
    assert loaded.in_scope.mix == 0.0
    assert loaded.in_scope.bank is None
    probes = ["renew my driver license", "weather tomorrow"]
    x = word_embed(probes)
    np.testing.assert_allclose(loaded.scores(x, probes)[1], router.scores(x, probes)[1], atol=1e-6)


def test_a_question_scored_as_if_its_expert_did_not_exist_loses_its_experts_evidence(tmp_path):
    router = trained().router
    texts, y = questions(4, 15)
    x = word_embed(texts)
    bank_texts, bank_y = questions(3, 60)
    bank, bank_y = nearest_bank(word_embed(bank_texts), bank_y, 3, cap=100)
    router.in_scope = InScope(0.5, router.score_scale, bank, bank_y=bank_y)
    served = router.scores(x, texts)[1]
    held = router.held_out_scores(x, texts, y)
    assert held.shape == served.shape
    assert (held < served - 1e-9).mean() > 0.9
    router.save(tmp_path / "v")
    np.testing.assert_allclose(TextRouter.load(tmp_path / "v").held_out_scores(x, texts, y), held, atol=1e-5)
    router.in_scope.bank_y = None
    with pytest.raises(ValueError, match="bank rows' experts"):
        router.held_out_scores(x, texts, y)


def test_the_score_says_what_it_reads():
    assert InScope(0.0, 0.3).describe("prototype_similarity") == "prototype_similarity+char_confidence"
    assert InScope(1.0, 0.0, np.zeros((1, 2), np.float32)).describe("prototype_similarity") == "nearest_questions"
    assert InScope(0.5, 0.0, np.zeros((1, 2), np.float32)).describe("max_probability") == "max_probability+nearest_questions"
