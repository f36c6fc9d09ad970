"""A team makes its departments first (API and command), uploads their documents, and discovery follows them."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from experts.models import Expert
from tests.factories import make_expert

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(django_user_model):
    user = django_user_model.objects.create_user("member")
    user.groups.add(Group.objects.create(name="Citizens"))
    api = APIClient()
    api.force_authenticate(user)
    return api


def test_a_member_makes_a_department_of_their_team(member):
    response = member.post("/api/v1/experts", {"name": "  Motor   Vehicles ", "description": "Licences and plates"}, format="json")

    assert response.status_code == 201, response.content
    assert response.json() == {"slug": "motor-vehicles", "name": "Motor Vehicles", "description": "Licences and plates", "team": "Citizens",
                               "documents_url": "/api/v1/experts/motor-vehicles/documents"}
    assert Expert.objects.get(slug="motor-vehicles").team.name == "Citizens"


def test_a_taken_name_is_a_conflict_and_nothing_changes(member):
    make_expert("motor-vehicles", "Motor Vehicles", description="theirs", public=False)

    response = member.post("/api/v1/experts", {"name": "Motor Vehicles", "description": "mine"}, format="json")

    assert response.status_code == 409
    assert "exists already" in response.json()["error"]["message"]
    assert Expert.objects.get(slug="motor-vehicles").description == "theirs"


@pytest.mark.parametrize(("body", "field"), [({}, "name"), ({"name": "!!!"}, "name"), ({"name": "Billing", "team": "Nobody"}, "team")])
def test_bad_input_is_refused_with_the_field(member, body, field):
    response = member.post("/api/v1/experts", body, format="json")

    assert response.status_code == 400
    assert field in str(response.json())
    assert not Expert.objects.exists()


def test_someone_in_no_team_may_not_make_one(django_user_model):
    api = APIClient()
    api.force_authenticate(django_user_model.objects.create_user("loner"))

    assert api.post("/api/v1/experts", {"name": "Billing"}, format="json").status_code == 403


def test_the_command_makes_one_for_a_team_and_refuses_a_taken_name(capsys):
    Group.objects.create(name="Citizens")

    call_command("experts", "create", "Student Aid", "--team", "Citizens", "--description", "Loans and grants")

    assert "expert student-aid" in capsys.readouterr().out
    assert Expert.objects.get(slug="student-aid").team.name == "Citizens"
    with pytest.raises(CommandError, match="exists already"):
        call_command("experts", "create", "Student Aid")
    with pytest.raises(CommandError, match="no team named"):
        call_command("experts", "create", "Veterans", "--team", "Nobody")


def test_the_discovery_page_makes_a_department_and_goes_to_its_documents(client, django_user_model):
    user = django_user_model.objects.create_user("member2")
    user.groups.add(Group.objects.create(name="Veterans team"))
    client.force_login(user)

    page = client.get("/discovery/")
    assert b'id="new-department"' in page.content
    response = client.post("/discovery/departments/", {"department-name": "Veterans Affairs", "department-description": "Benefits"})

    assert response.status_code == 302
    assert response["Location"] == "/knowledge/veterans-affairs/"
    assert Expert.objects.get(slug="veterans-affairs").team.name == "Veterans team"
    taken = client.post("/discovery/departments/", {"department-name": "Veterans Affairs"})
    assert taken.status_code == 409
    assert b"exists already" in taken.content
    assert client.post("/discovery/departments/", {"department-name": ""}).status_code == 400
