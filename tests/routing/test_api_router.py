"""``/api/v1/router/...``: train a router (staff, 202 with the job), its versions with their figures and
activation verdict (another team's experts counted, not named), and activating one (staff)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from jobs.models import Job
from routing.models import RouterVersion, TrainingRun
from tests.factories import make_expert, make_team, make_user

pytestmark = pytest.mark.django_db
VERDICT = {"policy": "if_better", "activated": False, "active_version": 1, "n_heldout": 40, "heldout": "hash", "candidate_accuracy": 0.925,
           "active_accuracy": 0.95, "paired": {"new_only": 1, "active_only": 2, "p_value": 1.0},
           "reason": "new router: held-out accuracy 0.925 against 0.950 for active v1 on the same 40 questions; kept as a candidate (vault-7f3a)"}


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def world():
    """Team A's ``dmv`` and team B's ``vault-7f3a``; v1 serves, v2 was kept as a candidate by the gate."""
    roads, pensions = make_team("roads"), make_team("pensions")
    make_expert("dmv", team=roads, public=False)
    make_expert("vault-7f3a", team=pensions, public=False)
    common = {"path": "/nowhere", "experts": ["dmv", "vault-7f3a"], "embedding_model": "m"}
    v1 = RouterVersion.objects.create(version=1, data_fingerprint="1", is_active=True, metrics={"val": {"accuracy": 0.933}}, **common)
    v2 = RouterVersion.objects.create(version=2, data_fingerprint="2", metrics={"val": {"accuracy": 0.945, "macro_f1": 0.94},
                                                                               "gate": {"n": 40, "accuracy": 0.925}, "activation": VERDICT}, **common)
    run = TrainingRun.objects.create(router_version=v2, params={}, metrics={})
    return {"v1": v1, "v2": v2, "run": run, "member": client_for(make_user("ana", teams=(roads,))), "staff": client_for(make_user("boss", staff=True))}


def test_it_lists_versions_with_figures_and_the_verdict_in_words(world):
    versions = world["staff"].get("/api/v1/router/versions").json()

    assert [(v["version"], v["is_active"]) for v in versions] == [(2, False), (1, True)]
    v2 = versions[0]
    assert v2["validation"] == {"accuracy": 0.945, "macro_f1": 0.94}
    assert v2["gate"] == {"n": 40, "accuracy": 0.925}
    assert (v2["verdict"]["activated"], v2["verdict"]["candidate_accuracy"], v2["verdict"]["active_accuracy"]) == (False, 0.925, 0.95)
    assert v2["verdict"]["paired"]["p_value"] == 1.0
    assert v2["verdict"]["reason"].startswith("new router: held-out accuracy 0.925 against 0.950")
    assert v2["training_run"] == world["run"].pk


def test_a_member_sees_their_experts_and_a_count_of_the_others(world):
    v2 = world["member"].get("/api/v1/router/versions/2").json()

    assert (v2["experts"], v2["other_experts"]) == (["dmv"], 1)
    assert "vault-7f3a" not in str(v2)


def test_an_unknown_version_is_not_found(world):
    assert world["staff"].get("/api/v1/router/versions/9").status_code == 404
    assert world["staff"].post("/api/v1/router/versions/9/activate").status_code == 404


def test_staff_activate_a_version_and_a_member_may_not(world):
    refused = world["member"].post("/api/v1/router/versions/2/activate")
    activated = world["staff"].post("/api/v1/router/versions/2/activate")

    assert refused.status_code == 403
    assert activated.status_code == 200
    assert activated.json()["is_active"] is True
    assert list(RouterVersion.objects.filter(is_active=True).values_list("version", flat=True)) == [2]


def test_staff_start_a_training_with_the_consoles_defaults_and_their_own(world):
    response = world["staff"].post("/api/v1/router/train", {"activation": "if_better", "epochs": 5, "char_view": False}, format="json")

    assert response.status_code == 202
    job = Job.objects.get()
    assert response.json()["status_url"] == f"/api/v1/jobs/{job.pk}"
    assert (job.kind, job.params["activation"], job.params["epochs"], job.params["char_view"], job.params["hidden_dim"]) == (
        "train_router", "if_better", 5, False, 256)


def test_a_training_out_of_range_is_a_400_and_a_member_may_not_train(world):
    bad = world["staff"].post("/api/v1/router/train", {"epochs": 0, "activation": "sometimes"}, format="json")
    member = world["member"].post("/api/v1/router/train", {}, format="json")

    assert bad.status_code == 400
    assert "epochs" in bad.json()["error"]["message"]
    assert "activation" in bad.json()["error"]["message"]
    assert member.status_code == 403
    assert not Job.objects.exists()
