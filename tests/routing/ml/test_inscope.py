"""The in-scope score: the bank of training questions, the held-out-expert choice of evidence, saving and serving it."""

import json

import numpy as np
import pytest

from routing.ml.inscope import CHAR_SCALES, NEAREST_MIXES, InScope, fit_in_scope
from routing.ml.nearest import FILE as BANK_FILE
from routing.ml.nearest import NearestBank
from routing.ml.textrouter import BLEND_FILE, TextRouter
from tests.support.toy_router import questions, trained, word_embed


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
    bank = NearestBank.sample(x, y, 3, cap=100, seed=0)
    assert len(bank) <= 100
    assert set(bank.experts.tolist()) == {0, 1, 2}
    assert 80 <= (bank.experts == 0).sum() <= 92
    assert 8 <= (bank.experts == 1).sum() <= 12
    np.testing.assert_allclose(np.linalg.norm(bank.vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(bank.vectors, NearestBank.sample(x, y, 3, cap=100, seed=0).vectors)
    assert len(NearestBank.sample(x, y, 3, cap=5000)) == 1000
    with pytest.raises(ValueError, match="positive cap"):
        NearestBank.sample(x, y, 3, cap=0)
    with pytest.raises(ValueError, match="bank experts"):
        NearestBank(x[:2], np.array([0, 5]), 3)


def test_the_bank_reads_each_experts_nearest_questions_as_a_loop_would():
    rng = np.random.default_rng(1)
    x = unit(rng.normal(size=(60, 6))).astype(np.float32)
    y = np.r_[np.zeros(40, int), np.ones(17, int), np.full(3, 2)]  # expert 2 has fewer than K questions
    bank = NearestBank(x, y, 4)  # expert 3 has none
    q = unit(rng.normal(size=(7, 6))).astype(np.float32)
    sims = bank.similarities(q)
    per = bank.per_expert(sims)
    for i in range(3):
        expected = np.sort(q @ x[y == i].T, axis=1)[:, -5:].mean(axis=1)
        np.testing.assert_allclose(per[:, i], expected, atol=1e-5)
    np.testing.assert_allclose(per[:, 3], -1.0)
    np.testing.assert_allclose(bank.overall(sims), np.sort(q @ x.T, axis=1)[:, -5:].mean(axis=1), atol=1e-5)
    assert np.isinf(bank.per_expert_top(sims)[:, 2, :2]).all()


def test_nearest_questions_are_chosen_where_prototypes_are_too_coarse():
    centres, x_train, y_train = scattered(0)
    _, x_val, y_val = scattered(0)  # the same groups, other questions
    x_val = unit(x_val + 0.05 * np.random.default_rng(1).normal(size=x_val.shape)).astype(np.float32)
    bank = NearestBank.sample(x_train, y_train, 4, cap=4096)
    fitted = fit_in_scope(prototype_evidence(x_val, centres), "prototypes", x_val, y_val, bank, None, 0.0)
    assert fitted.mix > 0
    assert len(fitted.report["candidates"]) == len(NEAREST_MIXES)
    # The choice carries to questions of an expert the router never saw (the out-of-scope case).
    _, x_out, _ = scattered(7, experts=1)
    x_in = x_val[::3]
    def scores(in_scope, xq):
        return in_scope.combine(prototype_evidence(xq, centres).max(axis=1), bank.overall(bank.similarities(xq)), None)

    assert scores(fitted, x_in).min() > scores(fitted, x_out).max()
    assert not scores(InScope(), x_in).min() > scores(InScope(), x_out).max()


def test_the_confidence_counts_only_where_it_tells_experts_apart():
    rng = np.random.default_rng(3)
    n, experts = 400, 4
    y = np.arange(n) % experts
    x = unit(rng.normal(size=(n, 16))).astype(np.float32)
    bank = NearestBank.sample(unit(rng.normal(size=(200, 16))).astype(np.float32), np.arange(200) % experts, experts, cap=4096)
    network = rng.uniform(0.3, 0.5, size=(n, experts))  # knows nothing
    logits = rng.normal(size=(n, experts))
    useless = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    logits[np.arange(n), y] += 4.0
    telling = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert fit_in_scope(network, "prototypes", x, y, bank, telling, 1.0).char_scale > 0
    none = fit_in_scope(network + 3.0 * (np.arange(experts) == y[:, None]), "prototypes", x, y, bank, useless, 1.0)
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
    fitted = fit_in_scope(probs, "probabilities", x, y, NearestBank.sample(x, y, experts, cap=4096), None, 0.0)
    best = max(fitted.report["candidates"], key=lambda c: c["auroc"])
    assert best["auroc"] > 0.9  # the held-out expert's questions leave a flat rest: low highest probability


def test_bad_input_is_refused():
    x = np.eye(4, 3, dtype=np.float32)
    bank = NearestBank(x, np.zeros(4, int), 2)
    with pytest.raises(ValueError, match="every validation question"):
        fit_in_scope(np.zeros((4, 2)), "prototypes", x, np.zeros(3, int), bank, None, 0.0)
    with pytest.raises(ValueError, match="needs the router's bank"):
        InScope(0.5).held_out(np.zeros((4, 2)), "prototypes", None, x, np.zeros(4, int), None)
    one = fit_in_scope(np.zeros((4, 2)), "prototypes", x, np.zeros(4, int), bank, None, 1.0)
    assert one.mix == 0.0
    assert "skipped" in one.report


def test_a_router_with_nearest_evidence_scores_the_same_saved_and_one_question_at_a_time(tmp_path):
    router = trained().router
    texts, y = questions(3, 60)
    router.bank = NearestBank.sample(word_embed(texts), y, 3, cap=50)
    router.in_scope = InScope(0.5, router.score_scale)
    router.nearest_weight, router.nearest_temperature = 5.0, 0.8
    router.save(tmp_path / "v1")
    assert (tmp_path / "v1" / BANK_FILE).exists()
    loaded = TextRouter.load(tmp_path / "v1")
    assert (loaded.in_scope.mix, loaded.nearest_weight, loaded.nearest_temperature) == (0.5, 5.0, 0.8)
    probes = ["how do i renw my drivr licnse", "apply for student aid", "weather tomorrow"]
    x = word_embed(probes)
    probs, scores = router.scores(x, probes)
    np.testing.assert_allclose(loaded.scores(x, probes)[1], scores, atol=1e-5)
    plain_probs, network = TextRouter(router.model, router.char_view, router.weight, router.temperature, InScope(0.0, router.score_scale)).scores(x, probes)
    assert not np.allclose(scores, network)
    assert not np.allclose(probs, plain_probs)
    for i, text in enumerate(probes):
        p, s = loaded.score_one(x[i], text)
        np.testing.assert_allclose(p, probs[i], atol=1e-5)
        assert s == pytest.approx(float(scores[i]), abs=1e-5)


def test_a_router_saved_before_the_nearest_evidence_keeps_its_score(tmp_path):
    router = trained().router
    router.in_scope, router.bank, router.nearest_weight = InScope(0.0, router.score_scale), None, 0.0
    router.save(tmp_path / "old")
    blend = json.loads((tmp_path / "old" / BLEND_FILE).read_text())
    for key in ("nearest_mix", "nearest_weight", "nearest_temperature"):
        blend.pop(key)
    (tmp_path / "old" / BLEND_FILE).write_text(json.dumps(blend))
    loaded = TextRouter.load(tmp_path / "old")
    assert (loaded.in_scope.mix, loaded.nearest_weight) == (0.0, 0.0)
    assert loaded.bank is None
    probes = ["renew my driver license", "weather tomorrow"]
    x = word_embed(probes)
    np.testing.assert_allclose(loaded.scores(x, probes)[1], router.scores(x, probes)[1], atol=1e-6)


def test_a_question_scored_as_if_its_expert_did_not_exist_loses_its_experts_evidence(tmp_path):
    router = trained().router
    texts, y = questions(4, 15)
    x = word_embed(texts)
    bank_texts, bank_y = questions(3, 60)
    router.bank = NearestBank.sample(word_embed(bank_texts), bank_y, 3, cap=100)
    router.in_scope = InScope(0.5, router.score_scale)
    served = router.scores(x, texts)[1]
    held = router.held_out_scores(x, texts, y)
    assert held.shape == served.shape
    assert (held < served - 1e-9).mean() > 0.9
    router.save(tmp_path / "v")
    np.testing.assert_allclose(TextRouter.load(tmp_path / "v").held_out_scores(x, texts, y), held, atol=1e-5)
    router.bank = None
    with pytest.raises(ValueError, match="needs the router's bank"):
        router.held_out_scores(x, texts, y)


def test_the_score_says_what_it_reads():
    assert InScope(0.0, 0.3).describe("prototype_similarity") == "prototype_similarity+char_confidence"
    assert InScope(1.0, 0.0).describe("prototype_similarity") == "nearest_questions"
    assert InScope(0.5, 0.0).describe("max_probability") == "max_probability+nearest_questions"
