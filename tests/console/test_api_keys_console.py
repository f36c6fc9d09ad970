"""The API-key console pages: create (secret shown once), scopes limited to editable experts, revoke with confirmation."""

from __future__ import annotations

import pytest

from clients.models import ApiKey
from clients.services import create_key, hash_key
from tests.factories import roads_and_pensions

pytestmark = pytest.mark.django_db
PASSWORD = "correct horse battery staple"


@pytest.fixture
def teams(django_user_model):
    roads, _pensions = roads_and_pensions()  # dmv in roads, ssa in pensions, both private
    staff = django_user_model.objects.create_user("staff", password=PASSWORD, is_staff=True)
    member = django_user_model.objects.create_user("member", password=PASSWORD)
    member.groups.add(roads)
    stranger = django_user_model.objects.create_user("stranger", password=PASSWORD)
    return {"staff": staff, "member": member, "stranger": stranger}


def login(client, user):
    client.force_login(user)
    return client


def test_staff_create_an_unscoped_key_and_see_the_secret_once(client, teams):
    login(client, teams["staff"])
    response = client.post("/keys/create/", {"name": "chat ui", "rate_limit_per_minute": 120})
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    secret = response.context["secret"]
    assert secret in response.content.decode()
    key = ApiKey.objects.get()
    assert key.key_hash == hash_key(secret)
    assert key.scopes == []
    assert key.rate_limit_per_minute == 120
    listing = client.get("/keys/").content.decode()
    assert key.prefix in listing
    assert secret not in listing


def test_a_team_member_may_scope_a_key_to_experts_they_can_edit(client, teams):
    login(client, teams["member"])
    response = client.post("/keys/create/", {"name": "roads bot", "scopes": ["dmv"], "rate_limit_per_minute": 60})
    assert response.status_code == 200
    assert ApiKey.objects.get().scopes == ["dmv"]


def test_a_team_member_cannot_scope_a_key_to_another_teams_expert(client, teams):
    login(client, teams["member"])
    response = client.post("/keys/create/", {"name": "sneaky", "scopes": ["ssa"], "rate_limit_per_minute": 60})
    assert response.status_code == 400
    assert "ssa is not one of the available choices" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_a_team_member_cannot_create_an_unscoped_key(client, teams):
    login(client, teams["member"])
    response = client.post("/keys/create/", {"name": "everything", "rate_limit_per_minute": 60})
    assert response.status_code == 400
    assert "only staff" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_a_user_who_edits_no_expert_cannot_create_keys(client, teams):
    login(client, teams["stranger"])
    assert "cannot create keys" in client.get("/keys/").content.decode()
    assert client.post("/keys/create/", {"name": "x", "rate_limit_per_minute": 1}).status_code == 403
    assert not ApiKey.objects.exists()


def test_members_see_and_revoke_only_their_own_keys(client, teams):
    mine = create_key("mine", scopes=["dmv"], created_by=teams["member"]).key
    theirs = create_key("theirs", created_by=teams["staff"]).key
    login(client, teams["member"])
    listing = client.get("/keys/").content.decode()
    assert "mine" in listing
    assert "theirs" not in listing
    assert client.get(f"/keys/{theirs.pk}/revoke/").status_code == 404
    assert client.post(f"/keys/{theirs.pk}/revoke/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None
    confirm = client.get(f"/keys/{mine.pk}/revoke/")
    assert confirm.status_code == 200
    assert "401" in confirm.content.decode()
    mine.refresh_from_db()
    assert mine.revoked_at is None  # the GET only asks
    response = client.post(f"/keys/{mine.pk}/revoke/")
    assert response.status_code == 302
    mine.refresh_from_db()
    assert mine.revoked_at is not None


def test_the_pages_need_a_login(client):
    assert client.get("/keys/").status_code == 302
    assert client.post("/keys/create/", {"name": "x"}).status_code == 302
