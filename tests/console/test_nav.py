"""The console nav: every item's page exists (a wrong URL name fails loudly), and the items come in groups."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory
from django.urls import NoReverseMatch, reverse

from console import nav


@pytest.mark.parametrize("entry", nav.NAV_ITEMS, ids=[entry.label for entry in nav.NAV_ITEMS])
def test_every_nav_item_url_name_resolves(entry):
    assert reverse(entry.url_name)


def test_every_nav_item_is_in_a_known_group_and_every_group_has_items():
    assert {entry.group for entry in nav.NAV_ITEMS} == set(nav.NAV_GROUPS)
    assert len({entry.label for entry in nav.NAV_ITEMS}) == len(nav.NAV_ITEMS)


def _request(user, url_name=None):
    request = RequestFactory().get("/")
    request.user = user
    request.resolver_match = type("Match", (), {"url_name": url_name})() if url_name else None
    return request


@pytest.fixture
def member(django_user_model):
    return django_user_model.objects.create_user("rita", "rita@example.com", "pw-rita-1234")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("admin", "admin@example.com", "pw-admin-1234", is_staff=True)


@pytest.mark.django_db
def test_a_wrong_url_name_fails_loudly_instead_of_hiding_the_page(member, monkeypatch):
    monkeypatch.setattr(nav, "NAV_ITEMS", (*nav.NAV_ITEMS, nav.NavEntry("Nowhere", "no-such-page", (), False, "Operations")))
    with pytest.raises(NoReverseMatch):
        nav.nav(_request(member))


@pytest.mark.django_db
def test_an_item_in_an_unknown_group_fails_loudly(member, monkeypatch):
    monkeypatch.setattr(nav, "NAV_ITEMS", (*nav.NAV_ITEMS, nav.NavEntry("Lost", "console-overview", (), False, "Elsewhere")))
    with pytest.raises(ValueError, match="Elsewhere"):
        nav.nav(_request(member))


@pytest.mark.django_db
def test_nav_items_stay_flat_in_their_order_and_nav_groups_group_them(member, staff):
    context = nav.nav(_request(member, "console-heatmap"))
    labels = [item.label for item in context["nav_items"]]
    assert labels == [entry.label for entry in nav.NAV_ITEMS if not entry.staff_only]
    assert [item.label for item in context["nav_items"] if item.current] == ["Heatmap"]

    groups = {group.label: [item.label for item in group.items] for group in context["nav_groups"]}
    assert list(groups) == ["Answers", "Experts", "Operations"]
    assert groups["Answers"] == ["Overview", "Playground", "Traces", "Heatmap", "Review"]
    assert groups["Experts"] == ["Training", "Discovery", "Knowledge", "Experiments"]
    assert groups["Operations"] == ["Jobs", "Schedules", "Alarms", "API keys", "API docs"]
    assert [group.label for group in context["nav_groups"] if group.current] == ["Answers"]
    assert sorted(item.label for group in context["nav_groups"] for item in group.items) == sorted(labels)

    staff_groups = {group.label: [item.label for item in group.items] for group in nav.nav(_request(staff))["nav_groups"]}
    assert staff_groups["Operations"][-1] == "Admin"


def test_signed_out_visitors_get_no_nav():
    assert nav.nav(_request(AnonymousUser())) == {"nav_items": [], "nav_groups": []}


@pytest.mark.django_db
def test_console_pages_get_the_grouped_nav_in_their_context(client, member):
    client.force_login(member)
    response = client.get(reverse("console-heatmap"))
    assert response.status_code == 200
    assert [group.label for group in response.context["nav_groups"]] == ["Answers", "Experts", "Operations"]
    assert 'href="/heatmap/" aria-current="page">Heatmap' in response.content.decode()
