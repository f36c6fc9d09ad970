"""Teams in the console: staff create a team and add or remove its members, each change audited; nobody else may."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from audit.models import AuditEntry
from experts import teams
from tests.factories import make_team, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client):
    admin = make_user("admin", staff=True)
    client.force_login(admin)
    return admin


def test_staff_create_a_team_from_the_console_and_it_is_audited(client, staff):
    response = client.post(reverse("console-teams"), {"name": "  Roads   and Bridges "})

    team = Group.objects.get(name="Roads and Bridges")
    assert response.status_code == 302
    assert response["Location"] == reverse("console-team", args=[team.pk])
    entry = AuditEntry.objects.get(action="team.create")
    assert (entry.actor, entry.object_type, entry.object_repr) == (staff, "auth.group", "Roads and Bridges")
    listed = client.get(reverse("console-teams")).content.decode()
    assert "Roads and Bridges" in listed
    assert 'href="/teams/"' in listed  # in the nav, for staff


def test_a_second_team_of_the_same_name_is_refused_with_the_reason(client, staff):
    make_team("Roads")

    response = client.post(reverse("console-teams"), {"name": "roads"})

    assert response.status_code == 400
    assert "A team named &#x27;roads&#x27; exists already." in response.content.decode()
    assert Group.objects.count() == 1


def test_staff_add_and_remove_a_member_each_audited(client, staff):
    roads, rita = make_team("Roads"), make_user("rita")
    url = reverse("console-team", args=[roads.pk])
    assert '<option value="rita">rita</option>' in client.get(url).content.decode()

    client.post(url, {"action": "add", "username": "rita"})
    assert list(rita.groups.all()) == [roads]
    client.post(url, {"action": "remove", "username": "rita"})

    assert not rita.groups.exists()
    assert [(e.action, e.changes) for e in AuditEntry.objects.filter(action__startswith="team.").order_by("id")] == [
        ("team.add_member", {"member": "rita"}), ("team.remove_member", {"member": "rita"}),
    ]


def test_an_unknown_user_or_action_is_a_400_with_the_reason(client, staff):
    url = reverse("console-team", args=[make_team("Roads").pk])

    unknown = client.post(url, {"action": "add", "username": "nobody"})
    no_action = client.post(url, {"username": "admin"})

    assert unknown.status_code == 400
    assert "No user is called &#x27;nobody&#x27;." in unknown.content.decode()
    assert no_action.status_code == 400
    assert not AuditEntry.objects.filter(action__startswith="team.").exists()


def test_a_team_member_may_neither_see_nor_change_teams(client):
    roads = make_team("Roads")
    rita = make_user("rita", teams=(roads,))
    client.force_login(rita)

    assert client.get(reverse("console-teams")).status_code == 403
    assert client.post(reverse("console-teams"), {"name": "Mine"}).status_code == 403
    assert client.post(reverse("console-team", args=[roads.pk]), {"action": "add", "username": "rita"}).status_code == 403
    assert 'href="/teams/"' not in client.get(reverse("console-overview")).content.decode()
    with pytest.raises(PermissionDenied):
        teams.create_team("Mine", actor=rita)
    assert list(Group.objects.values_list("name", flat=True)) == ["Roads"]


def test_adding_a_member_twice_or_removing_a_stranger_is_refused_by_name(staff):
    roads, rita = make_team("roads"), make_user("rita")
    teams.add_member(roads, "rita", actor=staff)

    with pytest.raises(teams.TeamError, match="rita is in roads already"):
        teams.add_member(roads, "rita", actor=staff)
    teams.remove_member(roads, "rita", actor=staff)
    with pytest.raises(teams.TeamError, match="rita is not in roads"):
        teams.remove_member(roads, "rita", actor=staff)
    with pytest.raises(teams.TeamError, match="no user is called 'nobody'"):
        teams.add_member(roads, "nobody", actor=staff)
    assert not rita.groups.exists()
    assert AuditEntry.objects.filter(action__in=("team.add_member", "team.remove_member")).count() == 2
