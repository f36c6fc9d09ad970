"""The type-I error of the decision rule by simulation, with peeking (slow: thousands of experiments)."""

from __future__ import annotations

import pytest

from routing.experiments import stats as abtest


@pytest.mark.slow
def test_the_sequential_design_keeps_its_false_positive_rate_below_alpha_despite_20_peeks():
    report = abtest.simulation_report(abtest.Config(design="sequential"), n_simulations=2000, looks=20, seed=11)
    assert report["false_positive_rate"] <= 0.05
    assert report["false_positive_rate_ci"][1] <= 0.05


@pytest.mark.slow
def test_the_fixed_design_is_at_alpha_with_its_planned_power():
    report = abtest.simulation_report(abtest.Config(design="fixed"), n_simulations=2000, seed=11)
    # Read once at the planned sample: the rate is alpha up to simulation noise, the power is the planned 80%.
    assert report["false_positive_rate_ci"][0] <= 0.05 <= report["false_positive_rate_ci"][1] + 0.005
    assert report["power_ci"][0] <= 0.8 <= report["power_ci"][1] + 0.01
