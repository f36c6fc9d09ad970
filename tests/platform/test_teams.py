"""Teams across the console: the nav (every page, a wrong URL name fails loudly), password change,
staff against team members on the overview, and the friendly 403/404 pages."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from django.urls import NoReverseMatch, reverse

from console import nav
from routing.models import RoutingEvent
from tests.factories import make_expert, make_team, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(django_user_model):
    roads, pensions = make_team("roads"), make_team("pensions")
    make_expert("dmv", "Motor Vehicles", team=roads, public=False)
    make_expert("ssa", "Social Security", team=pensions, public=False)
    make_expert("faq", "General FAQ", public=False)
    RoutingEvent.objects.create(request_id="1", mode="auto", expert="dmv")
    RoutingEvent.objects.create(request_id="2", mode="auto", expert="ssa")
    member = django_user_model.objects.create_user("rita", "rita@example.com", "pw-rita-1234")  # her password is changed below
    member.groups.add(roads)
    return member, make_user("admin", staff=True)


def test_the_nav_lists_every_page_and_a_wrong_url_name_fails_loudly(world, monkeypatch):
    member, staff = world
    request = RequestFactory().get("/heatmap/")
    request.user, request.resolver_match = member, None
    labels = [item.label for item in nav.nav_items(request)]
    assert labels[:6] == ["Overview", "Playground", "Traces", "Heatmap", "Review", "Training"]
    assert "Admin" not in labels

    request.user = staff
    labels = [item.label for item in nav.nav_items(request)]
    assert "Admin" in labels

    # A misspelt page used to vanish from the nav; now every page renders the error instead.
    monkeypatch.setattr(nav, "NAV_ITEMS", (*nav.NAV_ITEMS, nav.NAV_ITEMS[0]._replace(label="Nowhere", url_name="no-such-page")))
    with pytest.raises(NoReverseMatch):
        nav.nav_items(request)


def test_the_current_page_is_marked_in_the_nav(client, world):
    member, _staff = world
    client.force_login(member)
    body = client.get(reverse("console-heatmap")).content.decode()
    assert 'href="/heatmap/" aria-current="page">Heatmap' in body


def test_a_team_member_sees_their_team_and_teamless_experts_staff_see_all(client, world):
    member, staff = world
    client.force_login(member)
    response = client.get(reverse("console-overview"))
    assert sorted(h.expert.slug for h in response.context["experts"]) == ["dmv", "faq"]
    assert response.context["traffic"].week == 1  # traffic to their experts only
    assert "Social Security" not in response.content.decode()

    client.force_login(staff)
    response = client.get(reverse("console-overview"))
    assert sorted(h.expert.slug for h in response.context["experts"]) == ["dmv", "faq", "ssa"]
    assert response.context["traffic"].week == 2


def test_the_overview_shows_circuit_states_from_the_breaker(client, world):
    _member, staff = world
    client.force_login(staff)
    circuits = {h.expert.slug: h.circuit for h in client.get(reverse("console-overview")).context["experts"]}
    assert set(circuits.values()) <= {"closed", "open", "half_open", "unknown"}


def test_password_change_validates_next_to_the_field_and_then_changes_it(client, world):
    member, _staff = world
    client.force_login(member)
    assert client.get(reverse("password_change")).status_code == 200

    bad = client.post(reverse("password_change"), {"old_password": "wrong", "new_password1": "x", "new_password2": "y"})
    assert bad.status_code == 200
    assert 'id="old_password-error"' in bad.content.decode()

    good = client.post(reverse("password_change"), {"old_password": "pw-rita-1234", "new_password1": "a much longer pass 42", "new_password2": "a much longer pass 42"})
    assert good["Location"] == reverse("password_change_done")
    member.refresh_from_db()
    assert member.check_password("a much longer pass 42")


def test_a_forbidden_action_shows_the_friendly_403_page(client, world):
    member, _staff = world
    client.force_login(member)
    response = client.post(reverse("console-training-start"), {})
    assert response.status_code == 403
    assert 'id="forbidden"' in response.content.decode()


def test_open_alarms_show_on_the_overview_to_whom_they_concern(client, world):
    from routing.alarms.models import Alarm

    member, staff = world
    Alarm.objects.create(kind="load", key="load:ssa", subject="ssa", experts=["ssa"], message="Social Security took 80% of requests")
    Alarm.objects.create(kind="load", key="load:dmv", subject="dmv", experts=["dmv"], message="Motor Vehicles took 70% of requests")
    Alarm.objects.create(kind="load", key="old", subject="dmv", experts=["dmv"], message="resolved long ago", status="acknowledged")

    client.force_login(member)
    assert [a.subject for a in client.get(reverse("console-overview")).context["alarms"]] == ["dmv"]
    client.force_login(staff)
    body = client.get(reverse("console-overview")).content.decode()
    assert 'id="alarms"' in body
    assert "took 80%" in body
    assert "resolved long ago" not in body


def test_a_team_member_can_ask_only_their_visible_experts_directly_in_the_playground(client, world):
    member, _staff = world
    client.force_login(member)
    modes = [v for v, _ in client.get(reverse("console-playground")).context["form"].fields["mode"].choices]
    assert modes == ["auto", "auto:fast", "dmv", "faq"]

    response = client.post(reverse("console-playground"), {"question": "pension age?", "mode": "ssa"})
    assert response.status_code == 400
