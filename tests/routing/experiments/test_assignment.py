"""Assignment of subjects to arms: deterministic, sticky, at the configured split, cheap."""

from __future__ import annotations

import pytest
from scipy import stats

from routing.experiments import assignment, services

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    assignment.clear_cache()
    yield
    assignment.clear_cache()


def test_nobody_is_assigned_without_a_running_experiment(expert):
    services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2)
    assert assignment.assign("conversation-1") is None


def test_assignment_is_deterministic_and_names_the_arm_version(expert):
    exp = services.start(services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2))
    first = assignment.assign("conversation-1")
    assert first == assignment.assign("conversation-1")
    assert first.experiment_id == exp.pk
    assert first.expert_versions == {"dmv": 2 if first.arm == "treatment" else 1}
    assert first.router_version is None


def test_split_proportions_match_the_configuration(expert):
    exp = services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2, split=0.2)
    arms = [assignment.arm_for(exp.salt, exp.split, f"user-{i}") for i in range(20000)]
    treated = arms.count("treatment")
    # A binomial test at the configured share does not reject.
    assert stats.binomtest(treated, 20000, 0.2).pvalue > 0.001
    assert 0.19 < treated / 20000 < 0.21


def test_assignment_is_sticky_across_pause_and_resume(expert):
    exp = services.start(services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2))
    before = {s: assignment.assign(s).arm for s in (f"c{i}" for i in range(200))}
    services.pause(exp)
    assert assignment.assign("c1") is None
    services.start(exp)
    assert {s: assignment.assign(s).arm for s in before} == before


def test_a_router_experiment_assigns_router_versions(routers):
    services.start(services.create_experiment(kind="router", control_version=1, treatment_version=2))
    a = assignment.assign("someone")
    assert a.router_version == (2 if a.arm == "treatment" else 1)
    assert a.expert_versions == {}


def test_the_running_experiments_are_cached(expert, django_assert_num_queries):
    services.start(services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2))
    assignment.assign("warm-up")
    with django_assert_num_queries(0):
        for i in range(50):
            assignment.assign(f"s{i}")


def test_concurrent_experiments_split_subjects_between_them(expert, routers):
    e1 = services.start(services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2))
    e2 = services.start(services.create_experiment(kind="router", control_version=1, treatment_version=2))
    ids = [assignment.assign(f"s{i}").experiment_id for i in range(2000)]
    assert {e1.pk, e2.pk} == set(ids)
    assert 0.45 < ids.count(e1.pk) / 2000 < 0.55
