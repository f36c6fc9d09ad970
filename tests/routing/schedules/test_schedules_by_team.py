"""The schedules page between two teams: a scheduled check's last message names no other team's expert."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse

from jobs.models import Job
from tests.factories import two_teams

pytestmark = pytest.mark.django_db


def test_the_last_message_of_a_scheduled_check_names_no_other_teams_expert(client, django_user_model, staff):
    call_command("ensure_schedules", verbosity=0)
    roads, _pensions = two_teams()  # dmv in roads; vault-7f3a, "MARKER-B Pension Vault", in pensions
    Job.objects.create(kind="scheduled_refresh_knowledge", key="scheduled:refresh_knowledge", title="Refresh knowledge bases", status="running",
                       message="indexing MARKER-B Pension Vault (vault-7f3a) after dmv")
    ana = django_user_model.objects.create_user("ana", "ana@example.com", "pw-ana-1234")
    ana.groups.add(roads)

    client.force_login(ana)
    page = client.get(reverse("console-schedules")).content.decode()
    assert "MARKER-B" not in page
    assert "vault-7f3a" not in page
    assert "after dmv" in page

    client.force_login(staff)
    assert "MARKER-B Pension Vault (vault-7f3a)" in client.get(reverse("console-schedules")).content.decode()
