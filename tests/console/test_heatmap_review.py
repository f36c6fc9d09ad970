"""The heatmap's data endpoint, the router-choice-by-reviewed-label confusion, and what a team member sees."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console import heatmap
from experts.models import Expert
from labeling.models import ReviewDecision
from routing.models import RoutingEvent
from tests.factories import make_expert, make_team

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(django_user_model):
    roads, pensions = make_team("roads"), make_team("pensions")
    dmv = make_expert("dmv", "Motor Vehicles", team=roads, public=False)
    ssa = make_expert("ssa", "Social Security", team=pensions, public=False)
    for i in range(3):
        RoutingEvent.objects.create(request_id=f"d{i}", mode="auto", expert="dmv")
    RoutingEvent.objects.create(request_id="s0", mode="auto", expert="ssa")
    member = django_user_model.objects.create_user("rita", "rita@example.com", "pw-rita-1234")
    member.groups.add(roads)
    staff = django_user_model.objects.create_user("admin", "admin@example.com", "pw-admin-1234", is_staff=True)
    return dmv, ssa, member, staff


def decide(request_id: str, routed: str, label: Expert | None) -> None:
    ReviewDecision.objects.create(request_id=request_id, reason="low_confidence", routed_expert=routed, expert=label)


def test_the_confusion_counts_router_choice_against_reviewed_label(world):
    dmv, ssa, *_ = world
    decide("a", "dmv", dmv)
    decide("b", "dmv", ssa)
    decide("c", "dmv", ssa)
    decide("d", "", ssa)
    decide("e", "ssa", None)  # dismissed: not a label

    confusion = heatmap.review_confusion()

    assert confusion["columns"] == ["dmv", "ssa"]
    assert [(r["routed"], [c["n"] for c in r["cells"]]) for r in confusion["rows"]] == [("dmv", [1, 2]), ("", [0, 1])]
    assert confusion["total"] == 4
    assert confusion["agreement"] == pytest.approx(0.25)
    assert [c["diagonal"] for c in confusion["rows"][0]["cells"]] == [True, False]


def test_the_data_endpoint_serves_the_heatmap_and_confusion_as_json(client, world, settings):
    settings.LOAD_ALARM_MIN_REQUESTS = 1
    _dmv, ssa, _member, staff = world
    decide("b", "dmv", ssa)
    client.force_login(staff)

    data = client.get(reverse("console-heatmap-data"), {"window": "7d"}).json()

    assert data["window"] == "7d"
    assert len(data["buckets"]) == 7
    by_slug = {e["slug"]: e for e in data["experts"]}
    assert by_slug["dmv"]["total"] == 3
    assert by_slug["dmv"]["share"] == pytest.approx(0.75)
    assert by_slug["dmv"]["over_threshold"]
    assert data["fair_share"] == pytest.approx(0.5)
    assert data["load_cv"] == pytest.approx(0.5)
    assert data["confusion"]["rows"][0]["routed"] == "dmv"


def test_the_page_draws_the_share_chart_from_the_endpoint_and_shows_the_confusion_table(client, world):
    _dmv, ssa, _member, staff = world
    decide("b", "dmv", ssa)
    client.force_login(staff)

    body = client.get(reverse("console-heatmap"), {"window": "24h"}).content.decode()

    assert 'data-src="/heatmap/data.json?window=24h"' in body
    assert 'id="review-confusion"' in body
    assert "2 ✕" not in body
    assert "1 ✕" in body
    assert "js/charts.js" in body


def test_a_team_member_sees_only_their_experts_rows_with_shares_of_all_traffic(client, world):
    *_, member, _staff = world
    client.force_login(member)

    data = client.get(reverse("console-heatmap-data")).json()

    assert [e["slug"] for e in data["experts"]] == ["dmv"]
    assert data["experts"][0]["share"] == pytest.approx(0.75)


def test_the_data_endpoint_needs_a_login(client, world):
    assert client.get(reverse("console-heatmap-data")).status_code == 302
