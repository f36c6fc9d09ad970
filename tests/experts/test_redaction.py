"""The redaction of other teams' experts in text written for everyone (job logs, training notes)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from experts.models import Expert
from experts.redaction import hidden_slugs, redactor_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def users(django_user_model):
    roads, pensions = Group.objects.create(name="roads"), Group.objects.create(name="pensions")
    Expert.objects.create(slug="dmv", name="Motor Vehicles", team=pensions)
    Expert.objects.create(slug="dmv-east", name="Motor Vehicles East", team=roads)
    Expert.objects.create(slug="faq", name="General FAQ")
    ana = django_user_model.objects.create_user("ana", "ana@example.com", "pw-ana-1234")
    ana.groups.add(roads)
    staff = django_user_model.objects.create_user("admin", "admin@example.com", "pw-admin-1234", is_staff=True)
    return ana, staff


def test_it_replaces_whole_slugs_and_names_of_hidden_experts_in_text_lists_and_keys(users):
    ana, _staff = users
    redact = redactor_for(ana)

    assert hidden_slugs(ana) == {"dmv"}
    assert redact("dmv and dmv-east; Motor Vehicles, Motor Vehicles East, motor vehicles") == (
        "another team's expert and dmv-east; another team's expert, Motor Vehicles East, another team's expert"
    )
    assert redact({"dmv": ["dmv", 3], "faq": None}) == {"another team's expert": ["another team's expert", 3], "faq": None}


def test_it_changes_nothing_for_staff(users):
    _ana, staff = users
    assert hidden_slugs(staff) == frozenset()
    assert redactor_for(staff)("dmv, Motor Vehicles") == "dmv, Motor Vehicles"
