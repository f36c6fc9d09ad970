"""The audit log: sign-ins, sign-outs, failed sign-ins and admin actions are recorded, with no secrets."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from audit.models import AuditEntry
from audit.services import record

PASSWORD = "correct horse battery staple"


@pytest.fixture
def admin_user(db):
    return User.objects.create_superuser("boss", "boss@example.com", PASSWORD)


def test_a_sign_in_and_sign_out_are_recorded_with_the_client_address(client, owner):
    assert client.post("/login/", {"username": "owner", "password": PASSWORD}, REMOTE_ADDR="203.0.113.7").status_code == 302
    client.post("/logout/", REMOTE_ADDR="203.0.113.7")
    entries = list(AuditEntry.objects.order_by("id").values_list("action", "actor_name", "ip"))
    assert entries == [("login", "owner", "203.0.113.7"), ("logout", "owner", "203.0.113.7")]


def test_a_failed_sign_in_records_the_name_tried_and_never_the_password(client, owner):
    client.post("/login/", {"username": "owner", "password": "hunter2-wrong-guess"})
    entry = AuditEntry.objects.get()
    assert entry.action == "login_failed"
    assert entry.object_repr == "owner"
    assert entry.actor is None
    assert "hunter2" not in json.dumps(list(AuditEntry.objects.values()), default=str)


def test_an_admin_change_is_recorded_with_the_changed_field_names_only(client, admin_user, owner):
    client.force_login(admin_user)
    response = client.post(f"/admin/auth/user/{owner.pk}/change/", {
        "username": "owner", "first_name": "Olive", "last_name": "", "email": "owner@example.com", "is_active": "on",
        "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00", "initial-date_joined_0": "2026-01-01", "initial-date_joined_1": "00:00:00",
    })
    assert response.status_code == 302, response.content[:2000]
    entry = AuditEntry.objects.get(action="admin.change")
    assert entry.actor == admin_user
    assert (entry.object_type, entry.object_id, entry.object_repr) == ("auth.user", str(owner.pk), "owner")
    assert "first_name" in " ".join(entry.changes["fields"]).lower().replace(" ", "_")
    assert "Olive" not in json.dumps(entry.changes)  # names of fields, never their values


def test_services_record_their_own_actions_and_secret_values_are_scrubbed(db, owner, rf):
    request = rf.post("/x", REMOTE_ADDR="198.51.100.4")
    request.user = owner
    entry = record("api_key.create", request=request, object_type="clients.apikey", object_id=7, object_repr="ci key",
                         changes={"scopes": ["chat"], "key": "sb-live-abcdef", "question": "my salary is 50k"})
    assert (entry.actor, entry.ip, entry.object_id) == (owner, "198.51.100.4", "7")
    assert entry.changes == {"scopes": ["chat"], "key": "[redacted]", "question": "[redacted]"}


def test_the_admin_listing_is_read_only(client, admin_user):
    record("login", actor=admin_user)
    client.force_login(admin_user)
    assert client.get("/admin/audit/auditentry/").status_code == 200
    assert client.get("/admin/audit/auditentry/add/").status_code == 403
    entry, before = AuditEntry.objects.first(), AuditEntry.objects.count()
    assert client.post(f"/admin/audit/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AuditEntry.objects.count() == before


def test_a_team_member_without_staff_rights_cannot_read_the_audit_log(client, owner):
    client.force_login(owner)
    response = client.get("/admin/audit/auditentry/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_entries_past_the_retention_period_are_pruned(db, settings):
    from datetime import timedelta

    from django.utils import timezone

    from audit.services import prune

    settings.AUDIT_RETENTION_DAYS = 30
    old, recent = record("login"), record("logout")
    AuditEntry.objects.filter(pk=old.pk).update(at=timezone.now() - timedelta(days=31))
    assert prune() == 1
    assert list(AuditEntry.objects.values_list("pk", flat=True)) == [recent.pk]
