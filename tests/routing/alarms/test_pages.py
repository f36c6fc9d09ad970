"""The alarms page: an alarm's proposal, and acknowledging it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from routing.alarms import services
from routing.alarms.models import Alarm

pytestmark = pytest.mark.django_db


def test_alarms_page_shows_the_proposal_and_acknowledges(admin_client):
    alarm = services.raise_alarm("load", "load:dmv", "dmv", "Expert dmv answered 80% of requests", "Split dmv: re-cluster its traffic")
    page = admin_client.get(reverse("console-alarms")).content.decode()
    assert "Split dmv: re-cluster its traffic" in page
    assert admin_client.post(reverse("console-alarm-ack", args=[alarm.pk])).status_code == 302
    assert Alarm.objects.get(pk=alarm.pk).status == "acknowledged"
