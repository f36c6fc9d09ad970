"""Creating and running experiments: the refusals of bad input, and the life cycle up to rollback."""

from __future__ import annotations

import pytest

from experts.models import ExpertVersion
from routing.experiments import services
from routing.experiments.models import Experiment
from routing.models import Feedback, RouterVersion, RoutingEvent

pytestmark = pytest.mark.django_db


def _create(expert, **kw):
    return services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2, **kw)


def test_it_refuses_an_expert_with_one_version(lonely_expert):
    with pytest.raises(services.ExperimentError, match="1 version") as exc:
        services.create_experiment(kind="expert", expert=lonely_expert, control_version=1, treatment_version=1)
    assert exc.value.param == "treatment_version"


def test_it_refuses_overlapping_experiments_on_the_same_expert(expert):
    _create(expert)
    with pytest.raises(services.ExperimentError, match="already has an open experiment"):
        _create(expert)


def test_a_stopped_experiment_frees_the_expert(expert):
    services.stop(_create(expert))
    assert _create(expert).status == "draft"


@pytest.mark.parametrize("split", [0.0, 1.0])
def test_it_refuses_a_split_with_an_empty_arm(expert, split):
    with pytest.raises(services.ExperimentError, match="both arms") as exc:
        _create(expert, split=split)
    assert exc.value.param == "split"


def test_it_refuses_unknown_or_identical_versions(expert):
    with pytest.raises(services.ExperimentError, match="no version 9"):
        services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=9)
    with pytest.raises(services.ExperimentError, match="different versions"):
        services.create_experiment(kind="expert", expert=expert, control_version=2, treatment_version=2)


def test_it_stores_the_power_calculation_before_start(expert):
    exp = _create(expert, design="fixed", baseline=0.6, min_effect=0.05)
    assert exp.plan["n_control"] == 4129
    assert exp.plan["n_total"] == 8258


def _traffic(exp, arm, n, ups):
    """``n`` answered requests in ``arm``, one conversation each, the first ``ups`` rated up and the rest down."""
    ids = [f"{arm}-{exp.pk}-{i}" for i in range(n)]
    RoutingEvent.objects.bulk_create([
        RoutingEvent(request_id=rid, mode="auto", expert="dmv", experiment_id=exp.pk, arm=arm, conversation_id=f"{arm}-{i}", total_ms=100.0 + i % 7)
        for i, rid in enumerate(ids)
    ])
    Feedback.objects.bulk_create([Feedback(request_id=rid, rating=1 if i < ups else -1, expert="dmv") for i, rid in enumerate(ids)])


def test_it_refuses_to_promote_with_too_little_data(expert):
    exp = services.start(_create(expert, design="fixed"))
    _traffic(exp, "control", 30, 15)
    _traffic(exp, "treatment", 30, 25)
    with pytest.raises(services.ExperimentError, match="too little data"):
        services.promote(exp)
    assert ExpertVersion.objects.get(expert=expert, status="active").version == 1


def test_read_gives_per_arm_rates_with_intervals(expert):
    exp = services.start(_create(expert))
    _traffic(exp, "control", 40, 20)
    _traffic(exp, "treatment", 40, 30)
    report = services.read(exp)
    primary = report["decision"]["primary"]
    assert primary["control"]["rate"] == pytest.approx(0.5)
    assert primary["treatment"]["rate"] == pytest.approx(0.75)
    assert primary["control"]["ci"][0] < 0.5 < primary["control"]["ci"][1]
    assert report["arms"]["control"]["units"] == 40
    assert {g["name"] for g in report["decision"]["guardrails"]} == {"fallback_rate", "abstain_rate", "latency_ms"}


def test_promote_and_rollback_switch_the_active_expert_version(expert):
    exp = services.start(_create(expert))
    _traffic(exp, "control", 400, 200)
    _traffic(exp, "treatment", 400, 320)
    exp = services.promote(exp)
    assert exp.status == "promoted"
    assert exp.winner == "treatment"
    assert exp.previous_version == 1
    assert ExpertVersion.objects.get(expert=expert, status="active").version == 2
    exp = services.rollback(exp)
    assert exp.status == "rolled_back"
    assert ExpertVersion.objects.get(expert=expert, status="active").version == 1


def test_a_router_experiment_promotes_the_router_version(routers):
    exp = services.start(services.create_experiment(kind="router", control_version=1, treatment_version=2))
    _traffic(exp, "control", 400, 200)
    _traffic(exp, "treatment", 400, 320)
    services.promote(exp)
    assert RouterVersion.objects.get(is_active=True).version == 2


def test_state_changes_in_the_wrong_state_are_refused(expert):
    exp = _create(expert)
    with pytest.raises(services.ExperimentError, match="cannot pause"):
        services.pause(exp)
    with pytest.raises(services.ExperimentError, match="only a promoted"):
        services.rollback(exp)
    assert Experiment.objects.get(pk=exp.pk).status == "draft"


def test_srm_check_raises_one_alarm_and_refreshes_it(expert):
    exp = services.start(_create(expert))
    _traffic(exp, "control", 300, 150)
    _traffic(exp, "treatment", 200, 100)
    first = services.check_srm(exp)
    second = services.check_srm(exp)
    assert first is not None
    assert first.pk == second.pk
    assert second.times_seen == 2
    assert "Sample ratio mismatch" in first.message


def test_an_expert_experiment_reads_only_that_experts_answers(expert):
    exp = services.start(_create(expert))
    _traffic(exp, "control", 20, 10)
    RoutingEvent.objects.create(request_id="other", mode="auto", expert="ssa", experiment_id=exp.pk, arm="treatment", conversation_id="x")
    assert services.arm_counts(exp)["treatment"]["requests"] == 0
