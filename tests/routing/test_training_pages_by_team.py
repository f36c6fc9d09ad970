"""A router training between two teams: its run and compare pages show a team member the figures of the
experts they may see, the others' confusion added up, and no other team's expert by name or slug."""

from __future__ import annotations

import pytest
from django.urls import reverse

from routing.models import RouterVersion, TrainingRun
from tests.factories import NAME_B, SLUG_B, make_expert, make_user, two_teams

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    """Team A (roads: ``dmv``), team B (pensions: ``vault-7f3a``, ``ssa``), a run over all three, a member of A, and staff."""
    roads, pensions = two_teams()
    make_expert("ssa", "MARKER-B Social Security", team=pensions, public=False)
    version = RouterVersion.objects.create(version=1, path="/nowhere/v1", experts=["dmv", SLUG_B, "ssa"], embedding_model="m", data_fingerprint="f")
    run = TrainingRun.objects.create(
        params={"hidden_dim": 256}, n_train=90, n_val=30, router_version=version,
        metrics={
            "val": {"accuracy": 0.8},
            "diagnostics": {
                "confusion": [[8, 1, 1], [2, 7, 1], [0, 3, 7]], "undecided": [SLUG_B],
                "per_expert": {"dmv": {"precision": 0.8, "recall": 0.8, "f1": 0.8, "support": 10},
                               SLUG_B: {"precision": 0.636, "recall": 0.7, "f1": 0.667, "support": 10}},
            },
            "knowledge": {"fitted": False, "reason": f"{SLUG_B} has no documents"},
        },
    )
    return run, make_user("ana", teams=(roads,)), make_user("admin", staff=True)


def test_a_run_page_shows_a_team_member_only_their_experts_and_adds_up_the_others(client, world):
    run, ana, _staff = world
    client.force_login(ana)

    response = client.get(reverse("console-training-run", args=[run.pk]))

    html = response.content.decode()
    assert SLUG_B not in html
    assert "MARKER-B" not in html
    assert [e["slug"] for e in response.context["per_expert"]] == ["dmv"]
    assert response.context["undecided"] == []
    confusion = response.context["confusion"]
    assert confusion["labels"] == ["Motor Vehicles", "Other teams' experts"]
    assert [[c["n"] for c in r["cells"]] for r in confusion["rows"]] == [[8, 2], [2, 18]]  # every count kept, the others' together
    assert "another team&#x27;s expert has no documents" in html


def test_the_compare_page_names_no_other_teams_expert(client, world):
    run, ana, _staff = world
    other = TrainingRun.objects.create(params={"hidden_dim": 128}, metrics={"val": {"accuracy": 0.7}}, router_version=None)
    client.force_login(ana)

    html = client.get(reverse("console-training-compare"), {"a": run.pk, "b": other.pk}).content.decode()

    assert SLUG_B not in html
    assert "MARKER-B" not in html


def test_staff_see_every_experts_figures(client, world):
    run, _ana, staff = world
    client.force_login(staff)

    response = client.get(reverse("console-training-run", args=[run.pk]))

    assert [e["slug"] for e in response.context["per_expert"]] == ["dmv", SLUG_B]
    assert response.context["confusion"]["labels"] == ["Motor Vehicles", NAME_B, "MARKER-B Social Security"]
    assert f"{SLUG_B} has no documents" in response.content.decode()
