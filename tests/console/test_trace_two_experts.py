"""The trace page tells a two-expert answer, a clarifying question and the reply that chose an expert (``serving.breadth``)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from routing.models import RoutingEvent
from tests.factories import make_expert

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(django_user_model):
    make_expert("dmv", "Motor Vehicles", public=False)
    make_expert("ssa", "Social Security", public=False)
    return django_user_model.objects.create_user("admin", "admin@example.com", "pw-admin-1234", is_staff=True)


def page(client, staff, request_id: str, expert: str, trace: dict) -> str:
    RoutingEvent.objects.create(request_id=request_id, mode="auto", expert=expert, router_version=1,
                                experts=[{"slug": "dmv", "score": 0.6}, {"slug": "ssa", "score": 0.4}],
                                trace=trace, total_ms=10.0)
    client.force_login(staff)
    return client.get(reverse("console-trace", args=[request_id])).content.decode()


def test_a_two_expert_answer_names_both_experts(client, staff):
    html = page(client, staff, "r-both", "dmv", {"experts_answering": ["dmv", "ssa"]})
    assert "Both Motor Vehicles and Social Security answered, each its part" in html
    assert "answered by <strong>Motor Vehicles and Social Security</strong>" in html  # the badge names both, not the first part's
    assert html.count('<li class="chosen">') == 2  # both highlighted in the router's ranking
    one = page(client, staff, "r-one", "dmv", {})
    assert "answered by <strong>Motor Vehicles</strong>" in one
    assert one.count('<li class="chosen">') == 1


def test_a_question_that_asked_two_names_the_part_each_expert_answered(client, staff):
    html = page(client, staff, "r-parts", "dmv", {"experts_answering": ["dmv", "ssa"],
                                                  "asked": {"dmv": "How do I renew my licence", "ssa": "when is my pension paid?"}})
    assert "The question asked two things, each of another expert: Motor Vehicles answered “How do I renew my licence”; " \
           "Social Security answered “when is my pension paid?”." in html
    assert "each its part: the documents of each held the question" not in html
    unkept = page(client, staff, "r-parts-2", "dmv", {"experts_answering": ["dmv", "ssa"], "asked": {"dmv": "", "ssa": ""}})
    assert "Motor Vehicles answered its part; Social Security answered its part." in unkept


def test_a_clarifying_question_and_the_choice_after_it_are_told(client, staff):
    asked = page(client, staff, "r-asked", "", {"clarify": [{"slug": "ssa", "name": "Social Security"}, {"slug": "dmv", "name": "Motor Vehicles"}]})
    assert "The question could belong to Social Security or Motor Vehicles and nothing earlier in the conversation decided it" in asked
    chosen = page(client, staff, "r-chosen", "ssa", {"chosen_after_clarify": "ssa"})
    assert "The user chose Social Security when asked which expert they meant" in chosen
    assert 'id="trace-experts-answering"' not in chosen
