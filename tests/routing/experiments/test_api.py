"""``/api/v1/experiments/...``: create a draft, list, read and act on experiments, with the console's rules:
an expert's experiment is its team's (another team's is a 404), the router's is staff's."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from routing.experiments.models import Experiment
from tests.factories import make_team, make_user

pytestmark = pytest.mark.django_db
NEW = {"kind": "expert", "expert": "dmv", "control_version": 1, "treatment_version": 2, "min_effect": 0.2}


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def teams(expert):
    roads = make_team("roads")
    expert.team = roads
    expert.save(update_fields=["team"])
    return client_for(make_user("ana", teams=(roads,))), client_for(make_user("otto", teams=(make_team("others"),)))


def test_a_member_creates_an_experiment_on_their_expert_and_lists_and_reads_it(teams):
    member, _ = teams

    created = member.post("/api/v1/experiments", NEW, format="json")

    assert created.status_code == 201
    body = created.json()
    assert (body["expert"], body["status"], body["control_version"], body["treatment_version"], body["split"]) == ("dmv", "draft", 1, 2, 0.5)
    assert body["plan"]["n_total"] > 0
    assert [e["id"] for e in member.get("/api/v1/experiments").json()] == [body["id"]]
    assert member.get(f"/api/v1/experiments/{body['id']}").json()["name"] == "expert dmv: v1 vs v2"


def test_bad_input_is_a_400_with_the_field(teams):
    member, _ = teams

    split = member.post("/api/v1/experiments", {**NEW, "split": 1.0}, format="json")
    same = member.post("/api/v1/experiments", {**NEW, "treatment_version": 1}, format="json")

    assert split.status_code == 400
    assert split.json()["error"]["message"].startswith("split")
    assert same.status_code == 400
    assert not Experiment.objects.exists()


def test_it_starts_and_stops_and_a_second_start_is_a_conflict(teams):
    member, _ = teams
    pk = member.post("/api/v1/experiments", NEW, format="json").json()["id"]

    started = member.post(f"/api/v1/experiments/{pk}/start")
    again = member.post(f"/api/v1/experiments/{pk}/start")
    stopped = member.post(f"/api/v1/experiments/{pk}/stop")
    unknown = member.post(f"/api/v1/experiments/{pk}/explode")

    assert (started.status_code, started.json()["status"]) == (200, "running")
    assert again.status_code == 409
    assert (stopped.status_code, stopped.json()["status"]) == (200, "stopped")
    assert unknown.status_code == 404


def test_another_teams_experiment_is_not_found_and_their_expert_cannot_be_tested(teams):
    member, stranger = teams
    pk = member.post("/api/v1/experiments", NEW, format="json").json()["id"]

    assert stranger.get(f"/api/v1/experiments/{pk}").status_code == 404
    assert stranger.post(f"/api/v1/experiments/{pk}/start").status_code == 404
    assert stranger.post(f"/api/v1/experiments/{pk}/delete").status_code == 404
    assert stranger.get("/api/v1/experiments").json() == []
    assert stranger.post("/api/v1/experiments", NEW, format="json").status_code == 400  # dmv is not among the experts they may choose
    assert Experiment.objects.get().status == "draft"


def test_the_router_is_staffs_to_experiment_on(teams, routers, staff):
    member, _ = teams
    router = {"kind": "router", "control_version": 1, "treatment_version": 2, "min_effect": 0.2}

    refused = member.post("/api/v1/experiments", router, format="json")
    created = client_for(staff).post("/api/v1/experiments", router, format="json")

    assert refused.status_code == 403
    assert (created.status_code, created.json()["kind"]) == (201, "router")
