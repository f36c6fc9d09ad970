"""The audit log page: staff only, filtered by who, action, what and when."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEntry

pytestmark = pytest.mark.django_db


def test_staff_read_and_filter_the_audit_log_and_others_may_not(client, django_user_model):
    staff = django_user_model.objects.create_user("ada", "ada@example.com", "pw-ada-12345", is_staff=True)
    member = django_user_model.objects.create_user("bob", "bob@example.com", "pw-bob-12345")
    AuditEntry.objects.create(actor=staff, actor_name="ada", action="login", object_type="user", object_repr="ada")
    AuditEntry.objects.create(actor=staff, actor_name="ada", action="activate_version", object_type="expert", object_repr="dmv v3", changes={"version": 3})
    old = AuditEntry.objects.create(actor_name="carl", action="delete_document", object_type="document", object_repr="fees.pdf")
    AuditEntry.objects.filter(pk=old.pk).update(at=timezone.now() - timedelta(days=40))
    client.force_login(member)
    assert client.get(reverse("console-audit")).status_code == 403
    client.force_login(staff)
    url = reverse("console-audit")
    page = client.get(url).content.decode()
    assert "activate_version" in page
    assert "dmv v3" in page
    logins = [e.action for e in client.get(url, {"action": "login"}).context["page"]]
    assert logins
    assert set(logins) == {"login"}  # sign-ins are audited too (force_login's included)
    assert [e.object_repr for e in client.get(url, {"what": "fees"}).context["page"]] == ["fees.pdf"]
    recent = {e.actor_name for e in client.get(url, {"period": "7"}).context["page"]}
    assert "ada" in recent
    assert "carl" not in recent  # 40 days ago
    assert [e.actor_name for e in client.get(url, {"who": "carl"}).context["page"]] == ["carl"]
    assert client.get(url, {"action": "no-such"}).status_code == 400
