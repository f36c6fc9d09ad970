"""The A/B statistics: known answers, SRM, Holm, the mSPRT, and the decision rule (no database)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from routing.experiments import stats as abtest
from routing.experiments.stats import Config, MeanMetric, Proportion, RateMetric


def test_plan_matches_the_textbook_sample_size():
    # Two-sided alpha 0.05, power 0.8, 0.60 -> 0.63: n per arm = 2 ((z_.975 + z_.8) / h)^2 with Cohen's h
    # (each arcsine-transformed rate has variance 1/n, their difference 2/n).
    p = abtest.plan(Config(baseline=0.6, min_effect=0.05, design="fixed"))
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    h = 2 * math.asin(math.sqrt(0.63)) - 2 * math.asin(math.sqrt(0.6))
    assert p.n_control == p.n_treatment == math.ceil(2 * (z / h) ** 2)
    # The classic two-proportion formula lands on the same sample (to within one).
    classic = (stats.norm.ppf(0.975) * math.sqrt(2 * 0.615 * 0.385) + stats.norm.ppf(0.8) * math.sqrt(0.6 * 0.4 + 0.63 * 0.37)) ** 2 / 0.03**2
    assert abs(p.n_control - classic) <= 1
    assert p.n_control == 4129
    assert p.tau == pytest.approx(0.03)


def test_the_sequential_plan_is_sized_for_the_msprt_that_runs_and_reaches_its_power_there():
    config = Config(baseline=0.6, min_effect=0.05, design="sequential")
    p = abtest.plan(config)
    fixed = abtest.plan(Config(baseline=0.6, min_effect=0.05, design="fixed"))
    assert 1.6 * fixed.n_control < p.n_control < 2.2 * fixed.n_control  # the price of being allowed to look
    at = abtest.msprt_final_look_power(p.n_control, 1.0, 0.6, 0.63, p.tau, 0.05)
    assert 0.8 <= at < abtest.msprt_final_look_power(p.n_control - 30, 1.0, 0.6, 0.63, p.tau, 0.05) + 0.01  # the smallest such sample
    # By simulation, peeked at 20 times: at least the planned power (peeks only add), alpha kept.
    report = abtest.simulation_report(config, n_simulations=300, seed=3)
    assert report["power"] >= 0.8
    assert report["false_positive_rate"] <= 0.05


def test_plan_with_an_uneven_split_puts_more_in_the_larger_arm():
    p = abtest.plan(Config(split=0.2))
    assert p.n_treatment < p.n_control


@pytest.mark.parametrize("split", [0.0, 1.0, -0.1, 1.5])
def test_a_split_without_traffic_in_one_arm_is_refused(split):
    with pytest.raises(abtest.AbTestError, match="split"):
        abtest.plan(Config(split=split))


def test_an_effect_leaving_the_unit_interval_is_refused():
    with pytest.raises(abtest.AbTestError, match="leaves"):
        abtest.plan(Config(baseline=0.99, min_effect=0.05))


def test_wilson_interval_known_answer():
    low, high = abtest.wilson(Proportion(50, 100))
    assert low == pytest.approx(0.4038, abs=1e-4)
    assert high == pytest.approx(0.5962, abs=1e-4)


def test_z_test_known_answer():
    # 60/100 vs 70/100: pooled p 0.65, z = 0.1 / sqrt(0.65*0.35*0.02) = 1.4825, two-sided p = 0.1382.
    assert abtest.z_test(Proportion(60, 100), Proportion(70, 100)) == pytest.approx(0.1382, abs=1e-4)


def test_srm_agrees_with_scipy_chisquare_and_alarms_on_a_broken_split():
    for a, b, split in [(5000, 5000, 0.5), (5100, 4900, 0.5), (8000, 2100, 0.2)]:
        total = a + b
        expected = stats.chisquare([a, b], f_exp=[total * (1 - split), total * split]).pvalue
        assert abtest.srm_test(a, b, split) == pytest.approx(expected, rel=1e-9)
    assert abtest.srm_test(5000, 5000, 0.5) > 0.5
    assert abtest.srm_test(5300, 4700, 0.5) < abtest.SRM_ALPHA


def test_holm_agrees_with_statsmodels():
    p = [0.01, 0.04, 0.03, 0.2]
    reject, adjusted = abtest.holm(p)
    expected = multipletests(p, alpha=0.05, method="holm")
    assert reject == list(expected[0])
    assert adjusted == pytest.approx(list(expected[1]))
    # Holm: 0.01*4 = 0.04 rejected; 0.03*3 = 0.09 not, so nothing after it either.
    assert reject == [True, False, False, False]


def test_msprt_lambda_follows_the_mixture_formula():
    a, b, tau = Proportion(600, 1000), Proportion(650, 1000), 0.03
    v = 0.6 * 0.4 / 1000 + 0.65 * 0.35 / 1000
    expected = math.sqrt(v / (v + tau**2)) * math.exp(tau**2 * 0.05**2 / (2 * v * (v + tau**2)))
    assert abtest.msprt_lambda(a, b, tau) == pytest.approx(expected)
    assert abtest.msprt_p_value(a, b, tau) == pytest.approx(min(1, 1 / expected))


def test_msprt_is_more_conservative_than_a_single_z_test():
    a, b = Proportion(6000, 10000), Proportion(6150, 10000)
    assert abtest.z_test(a, b) < 0.05
    assert abtest.msprt_p_value(a, b, 0.03) > abtest.z_test(a, b)


def test_welch_difference_and_interval():
    rng = np.random.default_rng(0)
    a, b = rng.normal(100, 10, 500), rng.normal(110, 20, 500)
    out = abtest.welch(MeanMetric("latency_ms", a, b))
    assert out["difference"] == pytest.approx(b.mean() - a.mean())
    assert out["ci"][0] < out["difference"] < out["ci"][1]
    assert out["p_value"] < 1e-6


def _rate(a, na, b, nb, higher=True, name="thumbs_up_rate"):
    return RateMetric(name, Proportion(a, na), Proportion(b, nb), higher)


def test_decide_promotes_a_clear_improvement_in_the_sequential_design():
    d = abtest.decide(_rate(6000, 10000, 6600, 10000), Config(), n_control=10000, n_treatment=10000)
    assert d.outcome == "promote"
    assert d.can_promote
    assert d.primary["relative_lift"] == pytest.approx(0.1)


def test_decide_refuses_with_too_little_data_in_the_fixed_design():
    d = abtest.decide(_rate(60, 100, 90, 100), Config(design="fixed"), n_control=100, n_treatment=100)
    assert d.outcome == "continue"
    assert not d.can_promote
    assert "too little data" in d.reason


def test_decide_keeps_control_when_a_guardrail_regresses():
    guard = _rate(100, 10000, 400, 10000, higher=False, name="fallback_rate")
    d = abtest.decide(_rate(6000, 10000, 6600, 10000), Config(), guardrails=[guard], n_control=10000, n_treatment=10000)
    assert d.outcome == "keep_control"
    assert not d.can_promote
    assert "fallback_rate" in d.reason
    assert d.guardrails[0]["regressed"]


def test_decide_keeps_control_when_the_primary_gets_worse():
    d = abtest.decide(_rate(6600, 10000, 6000, 10000), Config(), n_control=10000, n_treatment=10000)
    assert d.outcome == "keep_control"


def test_decide_blocks_everything_on_sample_ratio_mismatch():
    d = abtest.decide(_rate(6000, 10000, 6600, 10000), Config(), n_control=10000, n_treatment=9000)
    assert d.outcome == "invalid_srm"
    assert d.srm_alarm
    assert not d.can_promote


def test_decide_reports_no_difference_at_the_planned_horizon():
    n = abtest.plan(Config(design="fixed")).n_control
    d = abtest.decide(_rate(int(0.6 * n), n, int(0.6 * n) + 5, n), Config(design="fixed"), n_control=n, n_treatment=n)
    assert d.outcome == "no_difference"


def test_small_simulation_null_rejections_stay_near_alpha_and_effect_is_found():
    # 200 null experiments: the sequential design rejects at most ~alpha even with 10 peeks.
    null = abtest.simulate(Config(), true_effect=0.0, n_simulations=200, looks=10, seed=3)
    assert null.rejections / 200 <= 0.08  # alpha 0.05 plus simulation noise (binomial sd ~0.015)
    big = abtest.simulate(Config(), true_effect=0.15, n_simulations=50, looks=10, seed=4)
    assert big.promotions / 50 >= 0.9
