"""``manage.py evaluate abtest --simulate``: the JSON keys scripts read, and clear refusals."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command


def test_it_writes_false_positive_rate_power_and_n_simulations(tmp_path):
    out = tmp_path / "abtest.json"
    call_command("evaluate", "abtest", "--simulate", "--n-simulations", "40", "--design", "fixed", "--baseline", "0.5", "--effect", "0.2", "--json", str(out))
    report = json.loads(out.read_text())
    assert report["n_simulations"] == 40
    assert 0 <= report["false_positive_rate"] <= 1
    assert report["power"] >= 0.6  # +20% on 0.5 at the planned sample (80% power planned)
    assert report["designs"]["fixed"]["planned_per_arm"]["control"] > 0


def test_an_effect_outside_the_unit_interval_is_refused():
    with pytest.raises(CommandError, match="leaves"):
        call_command("evaluate", "abtest", "--simulate", "--baseline", "0.99", "--effect", "0.5", "--n-simulations", "5")
