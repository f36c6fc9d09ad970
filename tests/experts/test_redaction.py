"""The redaction of other teams' experts in text written for everyone (job logs, training notes)."""

from __future__ import annotations

import pytest

from experts.redaction import hidden_slugs, redactor_for
from tests.factories import make_expert, make_team, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def users():
    roads, pensions = make_team("roads"), make_team("pensions")
    make_expert("dmv", "Motor Vehicles", team=pensions, public=False)
    make_expert("dmv-east", "Motor Vehicles East", team=roads, public=False)
    make_expert("faq", "General FAQ", public=False)
    return make_user("ana", teams=(roads,)), make_user("admin", staff=True)


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
