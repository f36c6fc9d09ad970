"""Alarms show to the teams of the experts they concern, whatever their subject: an experiment's alarm, a
router-wide one, one that names no expert, and the alarms raised before they recorded their experts."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.urls import reverse

from experts.models import Expert
from routing.alarms import services
from routing.alarms.models import Alarm
from routing.experiments import services as experiment_services
from routing.models import RoutingEvent
from tests.factories import make_expert, make_team

pytestmark = pytest.mark.django_db

SECRET = "MARKER-B-exp7 pensions prompt"


@pytest.fixture
def teams(django_user_model, expert, lonely_expert, staff):
    """Team A (roads: ``lanes``), team B (pensions: ``dmv`` with v1 and v2, and ``ssa``), a member of each, and staff."""
    roads, pensions = make_team("roads"), make_team("pensions")
    Expert.objects.filter(slug__in=["dmv", "ssa"]).update(team=pensions)
    make_expert("lanes", "Lanes", team=roads, public=False)
    ana = django_user_model.objects.create_user("ana", "ana@example.com", "pw-ana-1234")
    ana.groups.add(roads)
    bob = django_user_model.objects.create_user("bob", "bob@example.com", "pw-bob-1234")
    bob.groups.add(pensions)
    return ana, bob, staff


def srm_alarm(expert: Expert) -> Alarm:
    """A running experiment of ``expert`` whose arms broke their 50/50 split: its SRM alarm (subject: the experiment's number)."""
    experiment = experiment_services.start(experiment_services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2, name=SECRET))
    RoutingEvent.objects.bulk_create(
        [RoutingEvent(request_id=f"c{i}", mode="auto", expert=expert.slug, experiment_id=experiment.pk, arm="control", conversation_id=f"c{i}")
         for i in range(150)]
        + [RoutingEvent(request_id=f"t{i}", mode="auto", expert=expert.slug, experiment_id=experiment.pk, arm="treatment", conversation_id=f"t{i}")
           for i in range(50)]
    )
    alarm = experiment_services.check_srm(experiment)
    assert alarm is not None
    assert alarm.subject == str(experiment.pk)
    return alarm


def test_an_experiments_alarm_shows_only_to_the_team_of_its_expert_though_its_subject_is_a_number(client, teams, expert):
    ana, bob, staff = teams
    alarm = srm_alarm(expert)
    assert alarm.experts == ["dmv"]

    client.force_login(ana)
    assert SECRET not in client.get(reverse("console-alarms")).content.decode()
    assert SECRET not in client.get(reverse("console-overview")).content.decode()
    assert client.post(reverse("console-alarm-ack", args=[alarm.pk])).status_code == 403
    assert Alarm.objects.get(pk=alarm.pk).status == "open"

    for user in (bob, staff):
        client.force_login(user)
        assert SECRET in client.get(reverse("console-alarms")).content.decode()
        assert SECRET in client.get(reverse("console-overview")).content.decode()


def test_a_router_experiments_alarm_concerns_the_experts_its_router_versions_route_to(teams, routers):
    experiment = experiment_services.create_experiment(kind="router", control_version=1, treatment_version=2)
    assert experiment_services.experiment_experts(experiment) == ["dmv", "ssa"]


def test_a_router_wide_alarm_naming_no_expert_shows_to_everyone_signed_in_and_other_unnamed_alarms_to_staff_only(client, teams):
    ana, bob, staff = teams
    services.raise_alarm("drift", "drift:router", "router v3", "Recent questions drifted from the router's training data")
    services.raise_alarm("router", "router:candidate", "v4", "Router v4 was trained but not activated")
    services.raise_alarm("new_expert", "new_expert:abc", "", f"12 recent questions no expert covers: {SECRET}")
    services.raise_alarm("load", "load:ssa", "ssa", "Expert ssa answered 80% of requests", experts=["ssa"])

    client.force_login(ana)
    page = client.get(reverse("console-alarms")).content.decode()
    assert "drifted" in page
    assert "Router v4" in page
    assert SECRET not in page
    assert "answered 80%" not in page

    client.force_login(bob)
    page = client.get(reverse("console-alarms")).content.decode()
    assert "answered 80%" in page
    assert SECRET not in page

    client.force_login(staff)
    assert SECRET in client.get(reverse("console-alarms")).content.decode()


def test_alarms_raised_before_they_recorded_their_experts_are_filled_in_from_their_subject(teams, expert, routers):
    experiment = experiment_services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2, name=SECRET)
    router_experiment = experiment_services.create_experiment(kind="router", control_version=1, treatment_version=2)
    Alarm.objects.bulk_create([
        Alarm(kind="srm", key="srm:e", subject=str(experiment.pk), message=f"Sample ratio mismatch in {SECRET}"),
        Alarm(kind="srm", key="srm:r", subject=str(router_experiment.pk), message="router arms"),
        Alarm(kind="srm", key="srm:gone", subject="999", message="an experiment since deleted"),
        Alarm(kind="load", key="load:ssa", subject="ssa", message="ssa answered 80%"),
        Alarm(kind="drift", key="drift:router", subject="router v3", message="drifted"),
    ])

    importlib.import_module("routing.experiments.migrations.0002_alarm_experts").fill_experts(apps, None)

    assert dict(Alarm.objects.values_list("key", "experts")) == {
        "srm:e": ["dmv"], "srm:r": ["dmv", "ssa"], "srm:gone": [], "load:ssa": ["ssa"], "drift:router": [],
    }
